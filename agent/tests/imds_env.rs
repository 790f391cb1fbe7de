//! [`agent::identity::imds_client`] takes its endpoint from
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT`, as the SDK documents, and errors name
//! that endpoint. This binary holds one test because it sets the process
//! environment, which parallel tests would share.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

/// Answers the IMDSv2 token and `/latest/user-data` (token required), one request per connection.
fn start_imds() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push(line.trim_end().to_ascii_lowercase());
            }
            let has = |prefix: &str| head.iter().any(|h| h.starts_with(prefix));
            let (status, extra, body) =
                if head[0].starts_with("put /latest/api/token") && has("x-aws-ec2-metadata-token-ttl-seconds:") {
                    ("200 OK", "x-aws-ec2-metadata-token-ttl-seconds: 21600\r\n", "token")
                } else if head[0].starts_with("get /latest/user-data") && has("x-aws-ec2-metadata-token: token") {
                    ("200 OK", "", "user data from the env endpoint")
                } else {
                    ("401 Unauthorized", "", "")
                };
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    url
}

#[tokio::test]
async fn endpoint_comes_from_the_environment() {
    let url = start_imds();
    // SAFETY: this binary runs this one test; nothing else reads the environment concurrently.
    unsafe { std::env::set_var(agent::identity::ENDPOINT_VAR, &url) };
    assert_eq!(agent::identity::configured_endpoint(), url);
    let imds = agent::identity::imds_client();
    assert_eq!(agent::identity::user_data(&imds).await.unwrap(), "user data from the env endpoint");

    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let closed_url = format!("http://{closed}");
    // SAFETY: as above.
    unsafe { std::env::set_var(agent::identity::ENDPOINT_VAR, &closed_url) };
    let err = agent::identity::user_data(&agent::identity::imds_client()).await.unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with(&format!("IMDS at {closed_url} did not answer")), "{message}");
}
