//! A Kubernetes client that counts its requests (`pallet_api_requests_total{verb,resource}`), so
//! an operator or a benchmark sees what the agent costs the API server without an audit log.

use kube::client::ClientBuilder;
use tower::util::MapRequestLayer;

use crate::metrics::METRICS;

/// A client for `config` whose every request is counted by verb and resource.
pub fn counted_client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&MapRequestLayer::new(count_request::<kube::client::Body>))
        .build())
}

fn count_request<B>(request: http::Request<B>) -> http::Request<B> {
    let (verb, resource) = classify(
        request.method(),
        request.uri().path(),
        request.uri().query().unwrap_or(""),
    );
    METRICS.api_request(verb, resource);
    request
}

/// The Kubernetes verb and resource (`resource` or `resource/subresource`) of a request, from
/// its method and path as the API server's request info resolver reads them; `-` for paths
/// that name no resource (discovery, `/version`).
pub fn classify(method: &http::Method, path: &str, query: &str) -> (&'static str, String) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // namespaces/NS/RESOURCE/... is namespaced; namespaces and namespaces/NAME are the
    // Namespace objects themselves.
    let rest = match rest {
        ["namespaces", _ns, resource, tail @ ..] => {
            let mut v = vec![*resource];
            v.extend_from_slice(tail);
            v
        }
        other => other.to_vec(),
    };
    let Some((resource, tail)) = rest.split_first() else {
        return (other_verb(method), "-".to_string());
    };
    let named = !tail.is_empty();
    let resource = match tail.get(1) {
        Some(sub) => format!("{resource}/{sub}"),
        None => (*resource).to_string(),
    };
    let watching = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    let verb = match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PATCH => "patch",
        http::Method::PUT => "update",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

fn other_verb(method: &http::Method) -> &'static str {
    if *method == http::Method::GET {
        "get"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn verbs_and_resources_from_paths() {
        let c = |m: Method, p: &str, q: &str| {
            let (v, r) = classify(&m, p, q);
            format!("{v} {r}")
        };
        assert_eq!(c(Method::GET, "/api/v1/namespaces/a", ""), "get namespaces");
        assert_eq!(c(Method::GET, "/api/v1/namespaces", ""), "list namespaces");
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/a/configmaps/x", ""),
            "get configmaps"
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/x",
                "fieldManager=p"
            ),
            "patch deployments"
        );
        assert_eq!(
            c(
                Method::GET,
                "/apis/pallet.dev/v1alpha1/bundledeployments",
                "watch=true&resourceVersion=1"
            ),
            "watch bundledeployments"
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/pallet.dev/v1alpha1/bundledeployments/b/status",
                ""
            ),
            "patch bundledeployments/status"
        );
        assert_eq!(
            c(Method::POST, "/api/v1/namespaces/a/secrets", ""),
            "create secrets"
        );
        assert_eq!(
            c(
                Method::DELETE,
                "/api/v1/namespaces/a/secrets",
                "labelSelector=x"
            ),
            "deletecollection secrets"
        );
        assert_eq!(c(Method::GET, "/apis/apps/v1", ""), "get -");
        assert_eq!(c(Method::GET, "/version", ""), "get -");
    }
}
