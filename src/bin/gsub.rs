fn main() {
    gsched_cli::run("gsub", || {
        gsched_cli::gsub::main_with(std::env::args().skip(1).collect())
    });
}
