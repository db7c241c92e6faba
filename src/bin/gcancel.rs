fn main() {
    gsched_cli::run("gcancel", || {
        gsched_cli::gcancel::main_with(std::env::args().skip(1).collect())
    });
}
