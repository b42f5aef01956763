//! Link options of the shared object, both against the pager's own threads faulting on memory
//! only they can bring back (managed memory, which the pager may have swapped out):
//! - `-z now`: every symbol it imports is bound when it is loaded. With lazy binding, the first
//!   call of an imported function from a pager thread would run the dynamic linker's symbol
//!   lookup, which reads the loader's tables; those can live in the program's heap (allocated
//!   with its malloc after start-up).
//! - `-Bsymbolic`: its own references to symbols it defines bind to its own definitions. The C
//!   code linked into it (zstd's contexts, made on the event thread) calls `malloc`; the
//!   library defines `malloc` (the routing of `preload::malloc`: uswap's calls go to the
//!   internal heap), but a global lookup finds the *executable's* `malloc` first whenever the
//!   executable defines one (rustc and Rust programs built with an unprefixed jemalloc,
//!   programs linked with tcmalloc), and the event thread's zstd context then lived in the
//!   program's heap (`uswap run -- cargo build` hung that way). The program's own calls are
//!   not affected: they still find the library's interposers by the global lookup.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
