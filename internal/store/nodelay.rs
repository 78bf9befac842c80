//! `TCP_NODELAY` on the database connections.
//!
//! sqlx 0.9.0 opens its TCP connections without `TCP_NODELAY` (earlier
//! releases set it; the fix is merged upstream but not yet released). With
//! Nagle's algorithm on, a statement larger than one socket write (a batch
//! of results is tens of kilobytes) has its last segment held back until
//! the server acknowledges the first, and the server delays that
//! acknowledgement by up to 40 ms on Linux. Measured with the drain bench
//! on PostgreSQL: a 256-row result batch that the server executes in 5–8 ms
//! took 50–56 ms end to end, which capped a batch drain at ~9,000 items/s
//! with the machine three-quarters idle.
//!
//! sqlx offers no hook into its sockets, so right after each connection is
//! made, every TCP socket of this process that lacks `TCP_NODELAY` gets it.
//! That is harmless for the others (the handler client and the HTTP server
//! want it too), and costs one scan of the open descriptors per new
//! connection. Remove this once sqlx sets the option itself again.

// The socket calls below are each sound for the reason beside them.
#![allow(unsafe_code)]

/// Sets `TCP_NODELAY` on every TCP socket of this process that lacks it;
/// returns how many it set. A descriptor closed meanwhile is skipped.
#[cfg(target_os = "linux")]
pub(crate) fn set_on_open_sockets() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|fd| is_tcp(*fd) && option(*fd, libc::IPPROTO_TCP, libc::TCP_NODELAY) == Some(0))
        .filter(|fd| {
            let on: libc::c_int = 1;
            // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a
            // live local; on a descriptor that is not a socket (or was
            // closed since) it fails with an error code and changes nothing.
            unsafe {
                libc::setsockopt(
                    *fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                ) == 0
            }
        })
        .count()
}

/// Elsewhere the option is left to the driver.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_on_open_sockets() -> usize {
    0
}

/// A stream socket of the IPv4 or IPv6 family: a TCP connection or listener.
#[cfg(target_os = "linux")]
fn is_tcp(fd: i32) -> bool {
    option(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
        && matches!(
            option(fd, libc::SOL_SOCKET, libc::SO_DOMAIN),
            Some(libc::AF_INET | libc::AF_INET6)
        )
}

/// An integer socket option, or None when `fd` is not a socket.
#[cfg(target_os = "linux")]
fn option(fd: i32, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into a live local and
    // updates `len`; on a descriptor that is not a socket it fails.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(value)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn sets_the_option_on_a_connected_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        stream.set_nodelay(false).unwrap();
        assert!(!stream.nodelay().unwrap());
        // Other tests of this process connect stores, which call it too:
        // which call sets the option is theirs to race for; that it is
        // set is what counts.
        set_on_open_sockets();
        assert!(stream.nodelay().unwrap());
        let fd = stream.as_raw_fd();
        assert!(is_tcp(fd));
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(
            option(file.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TYPE),
            None
        );
    }
}
