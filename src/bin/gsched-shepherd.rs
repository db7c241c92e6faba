//! `gsched-shepherd`: the small process that runs one job for gnoded
//! (see gsched_noded::shepherd). Not meant to be run by hand.

fn main() {
    gsched_noded::shepherd::run_if_called_as_shepherd();
    eprintln!(
        "gsched-shepherd is started by gnoded for each job; it is not a command to run by hand"
    );
    std::process::exit(2);
}
