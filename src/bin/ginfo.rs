fn main() {
    gsched_cli::run("ginfo", || {
        gsched_cli::ginfo::main_with(std::env::args().skip(1).collect())
    });
}
