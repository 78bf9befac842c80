//! Wrong tokens from many addresses lock no one else out: each client
//! address has its own allowance per kind of token, the backstop over all
//! of them slows only clients that failed, and behind a `--trusted-proxy`
//! the client is the one `X-Forwarded-For` names.

use std::net::IpAddr;

use reqwest::StatusCode;
use serde_json::json;

use crate::on_all_backends;
use crate::support::{Handler, Proc, TestDb};

const ADMIN: &str = "throttle-admin-token-0123456789";
const PRODUCER: &str = "throttle-producer-token-9876543210";

/// Guessing addresses: enough that their failures together use up the
/// backstop (100) many times over.
const GUESSERS: u8 = 20;

/// A processor with the console, both tokens and `extra` flags; its base URL.
async fn console(db: &TestDb, extra: &[&str]) -> (Proc, Handler, String) {
    crate::console_api::enqueue(db, "p", false, &[("p/1", 0)]).await;
    let h = Handler::start(|_| crate::support::done()).await;
    let mut args = vec!["--ui", "--admin-token", ADMIN, "--producer-token", PRODUCER];
    args.extend_from_slice(extra);
    let p = Proc::start(db, &h.url(), &args);
    let base = format!("http://{}", p.listen.clone().unwrap());
    crate::support::wait_console(&base).await;
    (p, h, base)
}

/// A client whose connections come from `from` (any 127.x.y.z address is
/// this machine), sending `X-Forwarded-For: forwarded` when given.
fn client(from: &str, forwarded: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(f) = forwarded {
        headers.insert("x-forwarded-for", f.parse().unwrap());
    }
    reqwest::Client::builder()
        .local_address(from.parse::<IpAddr>().unwrap())
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The three doors a token opens: enqueue, an admin action, the login form.
struct Doors<'a> {
    base: &'a str,
}

impl Doors<'_> {
    async fn enqueue(&self, c: &reqwest::Client, token: &str) -> StatusCode {
        c.post(format!("{}/api/v1/partitions/p/items", self.base))
            .bearer_auth(token)
            .body(json!([{"data": 1}]).to_string())
            .send()
            .await
            .unwrap()
            .status()
    }

    async fn resume(&self, c: &reqwest::Client, token: &str) -> StatusCode {
        c.post(format!("{}/api/v1/partitions/p/resume", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
    }

    async fn login(&self, c: &reqwest::Client, token: &str) -> StatusCode {
        c.post(format!("{}/login", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Ten wrong tokens at each door: each is refused, as wrong (401) or,
    /// once the backstop is used up and this client has failed, as too
    /// many (429); the number of 401s.
    async fn guess(&self, c: &reqwest::Client, who: &str) -> usize {
        let mut wrong_answers = 0;
        for n in 0..10 {
            let wrong = format!("wrong-token-{who}-{n:04}");
            let enqueue = self.enqueue(c, &wrong).await;
            let door = if n % 2 == 0 {
                self.resume(c, &wrong).await
            } else {
                self.login(c, &wrong).await
            };
            for code in [enqueue, door] {
                assert!(
                    [StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS].contains(&code),
                    "{who} attempt {n}: {code}"
                );
                wrong_answers += usize::from(code == StatusCode::UNAUTHORIZED);
            }
        }
        wrong_answers
    }

    /// The right tokens work from `c`.
    async fn open_for(&self, c: &reqwest::Client, who: &str) {
        assert_eq!(self.enqueue(c, PRODUCER).await, StatusCode::OK, "{who}");
        assert_eq!(self.resume(c, ADMIN).await, StatusCode::OK, "{who}");
        assert_eq!(
            self.login(c, ADMIN).await,
            StatusCode::SEE_OTHER,
            "{who}: the login form logs in"
        );
    }

    /// A guesser is slowed: even the right tokens wait (429, Retry-After).
    async fn slowed(&self, c: &reqwest::Client, who: &str) {
        assert_eq!(
            self.enqueue(c, PRODUCER).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{who}"
        );
        let r = c
            .post(format!("{}/api/v1/partitions/p/resume", self.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{who}");
        assert!(r.headers().contains_key("retry-after"));
        assert_eq!(
            self.login(c, ADMIN).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{who}"
        );
    }
}

on_all_backends!(guessers_lock_no_one_else_out);
/// Twenty loopback addresses each send ten wrong producer tokens and ten
/// wrong admin tokens (API and login form): each of them is slowed, while
/// the right producer token, the admin token and the login form still
/// work from another address. A new address that fails once while the
/// backstop is used up is slowed at once.
async fn guessers_lock_no_one_else_out(db: TestDb) {
    let (_p, _h, base) = console(&db, &[]).await;
    let doors = Doors { base: &base };
    for n in 0..GUESSERS {
        let from = format!("127.0.0.{}", 10 + n);
        let wrong = doors.guess(&client(&from, None), &from).await;
        if n < 5 {
            assert_eq!(wrong, 20, "{from}: the backstop is not used up yet");
        }
    }
    doors
        .open_for(&client("127.0.0.1", None), "127.0.0.1")
        .await;
    // The last guesser: its failures are the freshest, so a slow machine
    // (one refill every 6 s) cannot have given it an attempt back.
    let last = format!("127.0.0.{}", 10 + GUESSERS - 1);
    doors.slowed(&client(&last, None), "a guesser").await;
    let late = client("127.0.0.200", None);
    assert_eq!(
        doors.resume(&late, "wrong-token-late-0000").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        doors.resume(&late, ADMIN).await,
        StatusCode::TOO_MANY_REQUESTS,
        "one failure while the backstop is used up is enough to wait"
    );
    assert_eq!(
        doors.enqueue(&late, PRODUCER).await,
        StatusCode::OK,
        "a wrong admin token does not count against the producer token"
    );
}

on_all_backends!(a_trusted_proxy_names_the_client);
/// Behind a `--trusted-proxy`, every request comes from the proxy's
/// address: wrong tokens count against the client `X-Forwarded-For`
/// names, so guessers behind the proxy are slowed and other clients behind
/// it are not. From a peer that is not trusted the header is ignored: a
/// guesser cannot pose as someone else.
async fn a_trusted_proxy_names_the_client(db: TestDb) {
    let (mut p, _h, base) = console(&db, &["--trusted-proxy", "127.0.0.1"]).await;
    let doors = Doors { base: &base };
    for n in 0..GUESSERS {
        let forwarded = format!("192.0.2.{n}");
        let wrong = doors
            .guess(&client("127.0.0.1", Some(&forwarded)), &forwarded)
            .await;
        if n < 5 {
            assert_eq!(wrong, 20, "{forwarded}: counted as its own client");
        }
    }
    let proxy = |f: &str| client("127.0.0.1", Some(f));
    doors
        .open_for(&proxy("198.51.100.7"), "a client behind the proxy")
        .await;
    // What a client wrote itself, left of the proxy's entry, changes nothing.
    doors
        .slowed(
            &proxy(&format!("198.51.100.7, 192.0.2.{}", GUESSERS - 1)),
            "a guesser behind the proxy",
        )
        .await;
    // From an untrusted peer, each attempt names another client; all
    // count against the peer, which failed while the backstop is used up.
    let untrusted = |f: &str| client("127.0.0.2", Some(f));
    let wrong = "wrong-token-untrusted-0000";
    assert_eq!(
        doors.resume(&untrusted("203.0.113.1"), wrong).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        doors.resume(&untrusted("203.0.113.2"), ADMIN).await,
        StatusCode::TOO_MANY_REQUESTS,
        "an untrusted peer's X-Forwarded-For is ignored"
    );
    p.terminate();
    let log = p.log();
    assert!(log.contains("client=192.0.2.3"), "{log}");
    assert!(!log.contains("client=203.0.113"), "{log}");
}
