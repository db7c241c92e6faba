fn main() {
    gsched_cli::run("gacct", || {
        gsched_cli::gacct::main_with(std::env::args().skip(1).collect())
    });
}
