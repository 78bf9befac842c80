//! Wrong tokens from many addresses lock no one else out: each client
//! address has its own allowance per kind of token, the backstop over all
//! of them slows only clients that failed, and behind a `--trusted-proxy`
//! the client is the one `X-Forwarded-For` names. The backstop gives one
//! attempt back every 0.6 s, so the guessing tests run alone: beside other
//! tests on a loaded machine, their 400 requests could outlast it.

use std::net::IpAddr;

use reqwest::StatusCode;
use serde_json::json;

use crate::behaviour;
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

    /// Ten wrong tokens at the enqueue route, then ten at the admin doors
    /// (API and login form): each is refused, as wrong (401) or, once
    /// this client or the backstop has used up its allowance, as too many
    /// (429). A wrong token at the enqueue route may be a guess at the
    /// admin token, so it also uses up the admin allowance. The number of
    /// 401s at the enqueue route and at the admin doors.
    async fn guess(&self, c: &reqwest::Client, who: &str) -> (usize, usize) {
        let (mut enqueue, mut doors) = (0, 0);
        for n in 0..20 {
            let wrong = format!("wrong-token-{who}-{n:04}");
            let code = match n {
                0..10 => self.enqueue(c, &wrong).await,
                _ if n % 2 == 0 => self.resume(c, &wrong).await,
                _ => self.login(c, &wrong).await,
            };
            assert!(
                [StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS].contains(&code),
                "{who} attempt {n}: {code}"
            );
            let wrong_answer = usize::from(code == StatusCode::UNAUTHORIZED);
            if n < 10 {
                enqueue += wrong_answer;
            } else {
                doors += wrong_answer;
            }
        }
        (enqueue, doors)
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

behaviour!(alone guessers_lock_no_one_else_out);
/// Twenty loopback addresses each send ten wrong tokens to the enqueue
/// route and ten to the admin doors (API and login form): each of them is
/// slowed, while
/// the right producer token, the admin token and the login form still
/// work from another address. A new address that fails once while the
/// backstop is used up is slowed at once.
async fn guessers_lock_no_one_else_out(db: TestDb) {
    let (_p, _h, base) = console(&db, &[]).await;
    let doors = Doors { base: &base };
    for n in 0..GUESSERS {
        let from = format!("127.0.0.{}", 10 + n);
        let (enqueue, admin) = doors.guess(&client(&from, None), &from).await;
        if n < 5 {
            assert_eq!(enqueue, 10, "{from}: the backstop is not used up yet");
            // One attempt refills each 6 s: a slow machine may give one back.
            assert!(admin <= 1, "{from}: the admin allowance is used up");
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

behaviour!(alone a_trusted_proxy_names_the_client);
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
        let (enqueue, _) = doors
            .guess(&client("127.0.0.1", Some(&forwarded)), &forwarded)
            .await;
        if n < 5 {
            assert_eq!(enqueue, 10, "{forwarded}: counted as its own client");
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
    // One line a minute per kind of token: the first failure's client.
    assert!(log.contains("latest=192.0.2.0"), "{log}");
    assert!(!log.contains("203.0.113"), "{log}");
}

behaviour!(the_enqueue_route_gives_no_second_allowance);
/// A client that used up its allowance of wrong admin tokens on the API
/// gets no more guesses at the admin token through the enqueue route:
/// there a wrong token and the right admin token are both 429, while its
/// right producer token still enqueues.
async fn the_enqueue_route_gives_no_second_allowance(db: TestDb) {
    let (_p, _h, base) = console(&db, &[]).await;
    let doors = Doors { base: &base };
    let c = client("127.0.0.7", None);
    for n in 0..10 {
        let wrong = format!("wrong-admin-token-{n:04}");
        assert_eq!(doors.resume(&c, &wrong).await, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(doors.resume(&c, ADMIN).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        doors.enqueue(&c, "wrong-admin-token-0010").await,
        StatusCode::TOO_MANY_REQUESTS,
        "a wrong token at the enqueue route is a guess at the admin token too"
    );
    assert_eq!(
        doors.enqueue(&c, ADMIN).await,
        StatusCode::TOO_MANY_REQUESTS,
        "the right admin token is not confirmed through the enqueue route"
    );
    assert_eq!(doors.enqueue(&c, PRODUCER).await, StatusCode::OK);
}

crate::backend_tests!(a_full_table_refuses_no_right_token: sqlite => Sqlite);
/// More guessing addresses than the throttle remembers (scaled down to 50
/// here; 100,000 by default) use up the backstop: a client never seen
/// before still gets in with the right token, while a remembered guesser
/// waits.
async fn a_full_table_refuses_no_right_token(db: TestDb) {
    crate::console_api::enqueue(&db, "p", false, &[("p/1", 0)]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let admin = feed::console::AdminToken::new(ADMIN).unwrap();
    let app = feed::console::Console::new(db.store.clone(), Some(admin))
        .remembering(50)
        .router();
    tokio::spawn(feed::server::serve(listener, app, std::future::pending()));
    let doors = Doors { base: &base };
    for n in 0..80u8 {
        let c = client(&format!("127.0.1.{n}"), None);
        for m in 0..2 {
            let code = doors.resume(&c, &format!("wrong-token-{n}-{m}")).await;
            assert!(
                [StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS].contains(&code),
                "{code}"
            );
        }
    }
    assert_eq!(
        doors.resume(&client("127.0.1.0", None), ADMIN).await,
        StatusCode::TOO_MANY_REQUESTS,
        "a remembered guesser waits"
    );
    assert_eq!(
        doors.resume(&client("127.0.2.1", None), ADMIN).await,
        StatusCode::OK,
        "a client never seen gets in with the right token"
    );
}
