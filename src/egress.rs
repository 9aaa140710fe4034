//! Where the agent may connect on behalf of a BundleDeployment: sources, chart repositories,
//! registries, git servers, notification targets and health probes.
//!
//! A BundleDeployment's author chooses those addresses, and the agent connects from inside the
//! cluster with its own network position. Loopback addresses (the agent's own metrics server,
//! sidecars) and link-local addresses (169.254.0.0/16 and fe80::/10, where cloud metadata
//! services hand out node credentials) are refused unless an agent flag allows them; `file://`
//! and local-path git repositories (the agent's own files) likewise.
//!
//! The check is made on the addresses a name resolves to, not on the name: the reqwest clients
//! resolve through [`GuardedResolver`] (so every connection, redirects included, is checked on
//! the address it connects to), and IP literals, which reqwest does not resolve, are checked on
//! the URL of the request and of every redirect; registries are reached with such a client.
//! libgit2 connects through the agent's git relay, which resolves the repository's host and
//! checks the addresses it connects to itself (see `source::git_relay`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// A class of addresses refused unless an agent flag allows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restricted {
    /// 127.0.0.0/8, ::1, and the unspecified addresses (0.0.0.0/8, ::), which reach the host
    /// itself.
    Loopback,
    /// 169.254.0.0/16, fe80::/10 and the well-known cloud metadata addresses outside them.
    LinkLocal,
}

impl Restricted {
    /// How the class is named in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Restricted::Loopback => "loopback",
            Restricted::LinkLocal => "link-local",
        }
    }

    /// The agent flag that allows the class.
    pub fn flag(self) -> &'static str {
        match self {
            Restricted::Loopback => "--allow-loopback-egress",
            Restricted::LinkLocal => "--allow-link-local-egress",
        }
    }
}

/// Cloud metadata services reachable at addresses that are not link-local: AWS's IPv6 endpoint
/// and Alibaba Cloud's.
const METADATA_ADDRESSES: [IpAddr; 2] = [
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// The restricted class `ip` belongs to, if any. IPv4 addresses embedded in IPv6 (mapped,
/// compatible, NAT64's well-known prefix) are judged as the IPv4 address they carry.
pub fn classify(ip: IpAddr) -> Option<Restricted> {
    if METADATA_ADDRESSES.contains(&ip) {
        return Some(Restricted::LinkLocal);
    }
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return classify_v4(v4);
            }
            if v6.is_loopback() || v6.is_unspecified() {
                Some(Restricted::Loopback)
            } else if v6.segments()[0] & 0xffc0 == 0xfe80 {
                Some(Restricted::LinkLocal)
            } else {
                None
            }
        }
    }
}

fn classify_v4(v4: Ipv4Addr) -> Option<Restricted> {
    if METADATA_ADDRESSES.contains(&IpAddr::V4(v4)) || v4.is_link_local() {
        Some(Restricted::LinkLocal)
    } else if v4.is_loopback() || v4.octets()[0] == 0 {
        Some(Restricted::Loopback)
    } else {
        None
    }
}

/// The IPv4 address an IPv6 address carries: `::ffff:a.b.c.d`, `::a.b.c.d` (except `::` and
/// `::1`) and `64:ff9b::a.b.c.d`.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compatible = s[..6].iter().all(|&x| x == 0) && !v6.is_loopback() && !v6.is_unspecified();
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0);
    (compatible || nat64).then_some(low)
}

/// A connection refused by the [`EgressPolicy`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressRefused {
    /// The host as named (a name or an IP literal).
    pub host: String,
    /// The address refused.
    pub address: IpAddr,
    /// Its class.
    pub class: Restricted,
}

impl std::fmt::Display for EgressRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (class, flag) = (self.class.as_str(), self.class.flag());
        if self.host == self.address.to_string() {
            write!(f, "{} is a {class} address", self.address)?;
        } else {
            write!(
                f,
                "{} resolves to {}, a {class} address",
                self.host, self.address
            )?;
        }
        write!(
            f,
            ": refused ({flag} allows it, on the agent and on the commands that fetch)"
        )
    }
}

impl std::error::Error for EgressRefused {}

/// Which restricted addresses and repository locations the agent may reach (agent and CLI
/// flags). The default refuses them all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Loopback addresses (`--allow-loopback-egress`).
    pub allow_loopback: bool,
    /// Link-local and cloud metadata addresses (`--allow-link-local-egress`).
    pub allow_link_local: bool,
    /// `file://` URLs and local paths as git repositories (`--allow-local-git`).
    pub allow_local_git: bool,
}

impl EgressPolicy {
    /// A policy allowing everything (local tools and tests against servers on this machine).
    pub fn allow_all() -> Self {
        EgressPolicy {
            allow_loopback: true,
            allow_link_local: true,
            allow_local_git: true,
        }
    }

    /// Whether `class` is allowed.
    pub fn allows(&self, class: Restricted) -> bool {
        match class {
            Restricted::Loopback => self.allow_loopback,
            Restricted::LinkLocal => self.allow_link_local,
        }
    }

    /// Refuses `address` (reached for `host`) when its class is not allowed.
    pub fn check_ip(&self, host: &str, address: IpAddr) -> Result<(), EgressRefused> {
        match classify(address) {
            Some(class) if !self.allows(class) => Err(EgressRefused {
                host: host.to_string(),
                address,
                class,
            }),
            _ => Ok(()),
        }
    }

    /// Refuses a URL whose host is an IP literal of a class not allowed (names are checked when
    /// they are resolved).
    pub fn check_url(&self, url: &url::Url) -> Result<(), EgressRefused> {
        let ip = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        self.check_ip(&ip.to_string(), ip)
    }

    /// Resolves `host` and refuses it when any of its addresses is of a class not allowed; for
    /// clients that resolve names themselves. An IP literal is checked as it is; a name that
    /// does not resolve is left to the client to report.
    pub async fn check_host(&self, host: &str, port: u16) -> Result<(), EgressRefused> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.check_ip(bare, ip);
        }
        if self.allow_loopback && self.allow_link_local {
            return Ok(());
        }
        let Ok(addresses) = tokio::net::lookup_host((bare, port)).await else {
            return Ok(());
        };
        for address in addresses {
            self.check_ip(bare, address.ip())?;
        }
        Ok(())
    }

    /// A reqwest client builder that resolves names through this policy and follows redirects
    /// as `redirects` says, checking every hop.
    pub fn http_client(&self, redirects: Redirects) -> reqwest::ClientBuilder {
        let builder =
            reqwest::Client::builder().dns_resolver(Arc::new(GuardedResolver { policy: *self }));
        let policy = *self;
        let redirect = match redirects {
            Redirects::None => reqwest::redirect::Policy::none(),
            Redirects::SameOrigin { max } => {
                reqwest::redirect::Policy::custom(move |a| judge_redirect(policy, a, max, false))
            }
            Redirects::AnyOrigin { max } => {
                reqwest::redirect::Policy::custom(move |a| judge_redirect(policy, a, max, true))
            }
        };
        builder.redirect(redirect)
    }
}

/// Which redirects a client follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redirects {
    /// None: a 3xx is the answer (health probes judge the URL they name; notification
    /// receivers that moved say so with their status).
    None,
    /// Up to `max` redirects on the first request's scheme, host and port.
    SameOrigin {
        /// Redirects followed at most.
        max: usize,
    },
    /// Up to `max` redirects to any host (a source that allows cross-host redirects).
    AnyOrigin {
        /// Redirects followed at most.
        max: usize,
    },
}

impl Redirects {
    /// Same-origin redirects, or any origin when `cross_host` is allowed.
    pub fn for_source(cross_host: bool, max: usize) -> Self {
        if cross_host {
            Redirects::AnyOrigin { max }
        } else {
            Redirects::SameOrigin { max }
        }
    }
}

/// A URL as messages show it: without credentials or query (a redirect target may carry a
/// signed query).
fn shown(url: &url::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// A redirect the client refused to follow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedirectRefused {
    /// To another scheme, host or port than the first request's.
    #[error(
        "redirect from {from} to {to} refused: another scheme, host or port \
         (the source's allowCrossHostRedirects allows it)"
    )]
    CrossHost {
        /// The first request's URL, as shown.
        from: String,
        /// The redirect's target, as shown.
        to: String,
    },
    /// To an address the policy refuses.
    #[error("redirect to {to}: {refused}")]
    Address {
        /// The redirect's target, as shown.
        to: String,
        /// Why it is refused.
        refused: EgressRefused,
    },
    /// Too many.
    #[error("more than {0} redirects")]
    TooMany(usize),
}

fn judge_redirect(
    policy: EgressPolicy,
    attempt: reqwest::redirect::Attempt<'_>,
    max: usize,
    any_origin: bool,
) -> reqwest::redirect::Action {
    if attempt.previous().len() > max {
        return attempt.error(RedirectRefused::TooMany(max));
    }
    if let Err(refused) = policy.check_url(attempt.url()) {
        let to = shown(attempt.url());
        return attempt.error(RedirectRefused::Address { to, refused });
    }
    if !any_origin {
        if let Some(first) = attempt.previous().first() {
            if first.origin() != attempt.url().origin() {
                let (from, to) = (shown(first), shown(attempt.url()));
                return attempt.error(RedirectRefused::CrossHost { from, to });
            }
        }
    }
    attempt.follow()
}

/// Whether `error` (or one of its causes) is a refusal of this policy: an address or a redirect.
pub fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<EgressRefused>() {
            return Some(refused.to_string());
        }
        if let Some(redirect) = e.downcast_ref::<RedirectRefused>() {
            if !matches!(redirect, RedirectRefused::TooMany(_)) {
                return Some(redirect.to_string());
            }
        }
        current = e.source();
    }
    None
}

/// A reqwest DNS resolver that refuses names resolving to an address the policy does not allow.
pub struct GuardedResolver {
    policy: EgressPolicy,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for address in &addresses {
                policy.check_ip(&host, address.ip())?;
            }
            let addresses: reqwest::dns::Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        })
    }
}

/// Where a git repository is: the server to connect to, or this machine's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GitLocation {
    /// `host` and `port` of a server (`https://`, `http://`, `ssh://`, `git://`, scp-like).
    Remote(String, u16),
    /// A local path or a `file://` URL.
    Local,
}

/// Where `repository` is; an error for a URL that does not parse.
pub fn git_location(repository: &str) -> Result<GitLocation, String> {
    if let Some((scheme, _)) = repository.split_once("://") {
        if scheme.eq_ignore_ascii_case("file") {
            return Ok(GitLocation::Local);
        }
        let url = url::Url::parse(repository)
            .map_err(|e| format!("git repository {repository:?}: {e}"))?;
        let port = url.port_or_known_default().unwrap_or(match url.scheme() {
            "ssh" => 22,
            "git" => 9418,
            _ => 443,
        });
        return Ok(match url.host_str() {
            Some(host) if !host.is_empty() => GitLocation::Remote(host.to_string(), port),
            _ => GitLocation::Local,
        });
    }
    // scp-like `[user@]host:path`: a colon before any slash. Anything else is a path.
    Ok(match repository.split_once(':') {
        Some((before, _)) if !before.contains('/') && !before.is_empty() => {
            let host = before.rsplit('@').next().unwrap_or(before);
            GitLocation::Remote(host.to_string(), 22)
        }
        _ => GitLocation::Local,
    })
}

/// Refuses a git repository location that is a local path or a `file://` URL unless the policy
/// allows local repositories. Returns the host and port of a remote one (the git relay checks
/// the addresses it connects to there).
pub fn check_git_location(
    policy: &EgressPolicy,
    repository: &str,
) -> Result<Option<(String, u16)>, String> {
    match git_location(repository)? {
        GitLocation::Remote(host, port) => Ok(Some((host, port))),
        GitLocation::Local if policy.allow_local_git => Ok(None),
        GitLocation::Local => Err(format!(
            "git repository {repository:?} is a local path or file:// URL: refused \
             (--allow-local-git allows it, on the agent and on the commands that fetch)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classes_of_addresses() {
        for loopback in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "::1",
            "::",
            "::ffff:127.0.0.1",
        ] {
            assert_eq!(
                classify(ip(loopback)),
                Some(Restricted::Loopback),
                "{loopback}"
            );
        }
        for link_local in [
            "169.254.169.254",
            "169.254.0.1",
            "fe80::1",
            "febf::1",
            "fd00:ec2::254",
            "100.100.100.200",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::169.254.169.254",
        ] {
            assert_eq!(
                classify(ip(link_local)),
                Some(Restricted::LinkLocal),
                "{link_local}"
            );
        }
        for open in [
            "10.0.0.1",
            "8.8.8.8",
            "2001:db8::1",
            "fec0::1",
            "100.100.100.201",
            "fd00::1",
        ] {
            assert_eq!(classify(ip(open)), None, "{open}");
        }
    }

    #[test]
    fn urls_with_ip_literals_are_checked() {
        let strict = EgressPolicy::default();
        let url = |s: &str| url::Url::parse(s).unwrap();
        let refused = strict
            .check_url(&url("http://169.254.169.254/latest/meta-data"))
            .unwrap_err();
        assert_eq!(refused.class, Restricted::LinkLocal);
        assert!(
            refused.to_string().contains("--allow-link-local-egress"),
            "{refused}"
        );
        assert!(strict.check_url(&url("http://[::1]:8080/x")).is_err());
        assert!(strict.check_url(&url("http://charts.example/x")).is_ok());
        let loopback = EgressPolicy {
            allow_loopback: true,
            ..Default::default()
        };
        assert!(loopback.check_url(&url("http://127.0.0.1:1/x")).is_ok());
        assert!(loopback
            .check_url(&url("http://169.254.169.254/x"))
            .is_err());
    }

    #[tokio::test]
    async fn names_are_checked_on_their_addresses() {
        let strict = EgressPolicy::default();
        let refused = strict.check_host("localhost", 80).await.unwrap_err();
        assert_eq!(refused.class, Restricted::Loopback);
        assert!(strict.check_host("[::1]", 80).await.is_err());
        assert!(EgressPolicy::allow_all()
            .check_host("localhost", 80)
            .await
            .is_ok());
    }

    #[test]
    fn git_locations() {
        let strict = EgressPolicy::default();
        for local in [
            "file:///srv/repo.git",
            "/srv/repo.git",
            "./repo",
            "repo.git",
            "FILE://x",
        ] {
            let err = check_git_location(&strict, local).unwrap_err();
            assert!(err.contains("--allow-local-git"), "{local}: {err}");
        }
        assert_eq!(
            check_git_location(&strict, "https://git.example/r.git").unwrap(),
            Some(("git.example".into(), 443))
        );
        assert_eq!(
            check_git_location(&strict, "ssh://git@127.0.0.1:2222/r.git").unwrap(),
            Some(("127.0.0.1".into(), 2222))
        );
        assert_eq!(
            check_git_location(&strict, "git@github.com:org/r.git").unwrap(),
            Some(("github.com".into(), 22))
        );
        let allowed = EgressPolicy {
            allow_local_git: true,
            ..Default::default()
        };
        assert_eq!(check_git_location(&allowed, "/srv/repo.git").unwrap(), None);
    }
}
