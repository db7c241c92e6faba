//! Who opened a TCP connection from this host: the uid that owns the
//! connecting socket, as the kernel says (sock_diag over netlink, the
//! interface `ss` uses). Connection caps count such connections per uid,
//! so a local user flooding a daemon's port from loopback holds only that
//! user's share, and root's daemons on the same host (gnoded's heartbeats
//! to gctld, gctld's launches to gnoded) keep theirs. The kernel's answer
//! cannot be forged by the user: a socket belongs to whoever created it.

use std::net::{IpAddr, SocketAddr};

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{
    AF_INET, AF_INET6, IPPROTO_TCP, TCP_LISTEN, TCP_TIME_WAIT,
};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::{Socket, SocketAddr as NetlinkAddr};

/// An address as the kernel keeps it for an IPv4 socket (IPv4-mapped
/// IPv6 addresses are IPv4 connections seen by a dual-stack listener).
fn plain(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// The uid owning the socket at the other end of a connection when that
/// socket is on this host (`peer` connected to our `local`, from any of
/// the host's addresses); `None` for a peer on another host, and when the
/// kernel does not say. Only a live socket counts: a closed one (in
/// TIME_WAIT, which the kernel reports as root's) is not believed.
pub fn uid_of(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (src, dst) = (plain(peer.ip()), plain(local.ip()));
    let family = match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => AF_INET,
        (IpAddr::V6(_), IpAddr::V6(_)) => AF_INET6,
        _ => return None,
    };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut packet = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            // The connecting socket: its own end first. No cookie: the
            // four addresses and ports name it.
            socket_id: SocketId {
                source_port: peer.port(),
                destination_port: local.port(),
                source_address: src,
                destination_address: dst,
                interface_id: 0,
                cookie: [0xff; 8],
            },
        })
        .into(),
    );
    packet.finalize();
    let mut request = vec![0; packet.buffer_len()];
    packet.serialize(&mut request);
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    // The kernel answers at once; never wait long for it in an accept loop.
    let limit = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // SAFETY: setsockopt reads the struct it is given, of the size given.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&socket),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&limit as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    socket.bind_auto().ok()?;
    socket.connect(&NetlinkAddr::new(0, 0)).ok()?;
    socket.send(&request, 0).ok()?;
    let mut answer = vec![0; 8192];
    let n = socket.recv(&mut &mut answer[..], 0).ok()?;
    let message = <NetlinkMessage<SockDiagMessage>>::deserialize(&answer[..n]).ok()?;
    match message.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r))
            if r.header.inode != 0
                && ![TCP_TIME_WAIT, TCP_LISTEN].contains(&r.header.state)
                && r.header.socket_id.source_port == peer.port()
                && plain(r.header.socket_id.source_address) == src =>
        {
            Some(r.header.uid)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_names_the_user_of_a_local_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        let local = server.local_addr().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!(uid_of(peer, local), Some(me));
        // A connection that does not exist has no owner, and one closed
        // (TIME_WAIT, reported as root's) is not believed.
        let gone = SocketAddr::new(peer.ip(), 1);
        assert_eq!(uid_of(gone, local), None);
        drop(client);
        drop(server);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(uid_of(peer, local), None);
    }
}
