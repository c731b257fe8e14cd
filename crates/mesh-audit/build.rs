// `sqlx::migrate!` embeds the migrations at compile time, but cargo cannot see files a
// proc macro reads: without this, editing a migration would not rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
