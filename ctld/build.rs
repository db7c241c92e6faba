// The store embeds its migrations (`sqlx::migrate!`): build again when one
// is added or changed.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    println!("cargo:rerun-if-changed=../migrations/postgres");
}
