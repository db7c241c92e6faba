fn main() {
    gsched_cli::run("gqueue", || {
        gsched_cli::gqueue::main_with(std::env::args().skip(1).collect())
    });
}
