//! Link the shared object with `-z now`: every symbol it imports is bound when it is loaded.
//! With lazy binding, the first call of an imported function from a pager thread would run the
//! dynamic linker's symbol lookup, which reads the loader's tables; those can live in the
//! program's heap (allocated with its malloc after start-up), which the pager may have swapped
//! out: the pager's own thread would then fault on memory only it can bring back.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
}
