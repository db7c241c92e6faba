//! One HTTP/1.1 request over a unix socket, for the controller's local
//! socket (no HTTP client crate in our stack speaks unix sockets). The
//! request says `Connection: close`, so the answer ends where the stream
//! does; its head is parsed with `httparse`, a chunked body is decoded.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Largest answer read (the job list of a large cluster fits).
const MAX_ANSWER: u64 = 256 << 20;

/// Sends `method target` with an optional JSON body; returns the status and body.
pub fn request(
    sock: &Path,
    method: &str,
    target: &str,
    body: Option<&[u8]>,
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    let mut head = format!(
        "{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAccept: application/json\r\n"
    );
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    // One write: the server may answer as soon as it has the head (a
    // handler that ignores the body) and close; a body written separately
    // would then hit a closed socket.
    let mut request = head.into_bytes();
    request.extend_from_slice(body.unwrap_or_default());
    match s.write_all(&request) {
        Ok(()) => {}
        // It answered before reading everything: the answer is still there.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e),
    }
    let mut raw = Vec::new();
    s.take(MAX_ANSWER).read_to_end(&mut raw)?;
    if raw.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the connection was closed before any answer",
        ));
    }
    parse_response(&raw)
}

fn bad(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

/// Status and body of a whole HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let n = match r.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(bad("the answer ended inside its head")),
        Err(e) => return Err(bad(format!("malformed answer: {e}"))),
    };
    let status = r.code.ok_or_else(|| bad("answer without a status"))?;
    let header = |name: &str| {
        r.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    let rest = &raw[n..];
    if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        return Ok((status, dechunk(rest)?));
    }
    match header("content-length") {
        Some(l) => {
            let len: usize = l.parse().map_err(|_| bad("bad Content-Length"))?;
            if rest.len() < len {
                return Err(bad("the answer ended early"));
            }
            Ok((status, rest[..len].to_vec()))
        }
        None => Ok((status, rest.to_vec())),
    }
}

fn dechunk(mut rest: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("bad chunk"))?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| bad("bad chunk size"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if rest.len() < size + 2 {
            return Err(bad("the answer ended inside a chunk"));
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_given_before_the_body_is_read_is_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            // Read only the head, answer, and close, as a handler that
            // ignores the body may.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                c.read_exact(&mut byte).unwrap();
                head.push(byte[0]);
            }
            c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                .unwrap();
        });
        // Larger than the socket's buffer, so the server closes mid-body.
        let body = vec![b' '; 8 << 20];
        let (status, answer) = request(&sock, "POST", "/x", Some(&body)).unwrap();
        server.join().unwrap();
        assert_eq!((status, answer.as_slice()), (200, b"{}".as_slice()));
    }

    #[test]
    fn bodies_by_length_and_by_chunks() {
        let (s, b) = parse_response(
            b"HTTP/1.1 201 Created\r\ncontent-length: 11\r\n\r\n{\"job_id\":1}extra",
        )
        .unwrap();
        assert_eq!(s, 201);
        assert_eq!(b, b"{\"job_id\":1");
        let (s, b) = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(s, 200);
        assert_eq!(b, b"{\"a\":1}");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Le").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}").is_err());
    }
}
