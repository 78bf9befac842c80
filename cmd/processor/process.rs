//! What the process sets up before any command runs: its allocator, the
//! C allocator's threshold, a quiet exit on a closed stdout, and the
//! shutdown signals.

/// glibc's malloc cost a fifth of the processor's CPU under load (perf);
/// mimalloc is much cheaper for its many small, short-lived allocations.
/// Built without transparent huge pages (`no_thp`): asking for them on its
/// arenas made a drain's peak RSS half as large again, at no gain in speed.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Installs the SIGTERM/SIGINT handlers now (so a signal that arrives
/// during start-up is not lost) and returns a future that resolves at the
/// first one; a second one exits at once.
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tokio::spawn(async move {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            eprintln!("second signal: exiting now");
            std::process::exit(130);
        });
    })
}

/// The C allocator (SQLite's, the TLS library's) serves blocks of 1 MiB
/// and more straight from the OS and gives them back when freed. glibc
/// otherwise raises that threshold each time such a block is freed, and
/// then keeps freed multi-megabyte blocks (a large result written to
/// SQLite) in its heap for good.
#[allow(unsafe_code)] // sound for the reason beside the call
pub fn return_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tuning value of glibc's allocator; it is
    // called once, before any other thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// `println!` panics when stdout is a closed pipe (`processor status | head -1`);
/// that is the reader's choice, not an error, so the process exits 0 quietly.
pub fn exit_quietly_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info)
    }));
}
