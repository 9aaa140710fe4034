//! Revision storage against the local control plane's API server: round trips, a ~5 MB bundle
//! in several chunks, listing and deletion, repair of partial or damaged saves, concurrent saves,
//! and that the Secrets are immutable. Each test works in a namespace of its own.

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use pallet::api::{ResolvedSource, SourceKind};
use pallet::revision::{
    encode, secret_name, RevisionError, RevisionRecord, RevisionStore, ANNOTATION_CHUNKS,
    ANNOTATION_REVISION_OF, ANNOTATION_SIZE, DATA_KEY, LABEL_CHUNK, LABEL_REVISION,
    LABEL_REVISION_OF, SECRET_TYPE,
};
use serde_json::json;

/// Words of random letters: varied text that gzip shrinks only about twofold, like real
/// manifests with embedded scripts and certificates rather than repeated boilerplate.
struct Text(u64);

impl Text {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn take(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 10);
        while out.len() < len {
            let word = 2 + self.next() % 8;
            for _ in 0..word {
                out.push(char::from(b'a' + (self.next() % 26) as u8));
            }
            out.push(if self.next().is_multiple_of(12) {
                '\n'
            } else {
                ' '
            });
        }
        out
    }
}

fn record(
    bd: &str,
    number: i64,
    config_maps: usize,
    bytes_each: usize,
    seed: u64,
) -> RevisionRecord {
    let mut text = Text(seed | 1);
    RevisionRecord {
        bundle_deployment: bd.to_string(),
        number,
        generation: number + 10,
        digest: format!("sha256:{:064x}", seed),
        sources: vec![
            ResolvedSource {
                kind: SourceKind::Git,
                reference: "main".into(),
                resolved: "3f9c2e1d3f9c2e1d3f9c2e1d3f9c2e1d3f9c2e1d".into(),
                version: None,
                verified: None,
            },
            ResolvedSource {
                kind: SourceKind::Image,
                reference: "registry.example/bundle:v1".into(),
                resolved: format!("registry.example/bundle@sha256:{:064x}", seed),
                version: None,
                verified: None,
            },
        ],
        objects: (0..config_maps)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("cm-{i}"), "namespace": "app", "labels": {"n": i.to_string()}},
                       "data": {"text": text.take(bytes_each)}})
            })
            .collect(),
        processors: vec![],
    }
}

async fn namespace(client: &Client, prefix: &str) -> String {
    let name = cluster::unique_name(prefix);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    name
}

async fn cleanup(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

/// The revision Secrets of `bd` (by label), ordered by chunk.
async fn chunk_secrets(client: &Client, ns: &str, bd: &str, number: i64) -> Vec<Secret> {
    let selector = format!(
        "{LABEL_REVISION_OF}={},{LABEL_REVISION}={number}",
        pallet::revision::bundle_key(bd)
    );
    let mut items = Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    items.sort_by_key(|s| {
        s.metadata.labels.as_ref().unwrap()[LABEL_CHUNK]
            .parse::<usize>()
            .unwrap()
    });
    items
}

fn uids(secrets: &[Secret]) -> Vec<String> {
    secrets
        .iter()
        .map(|s| s.metadata.uid.clone().unwrap())
        .collect()
}

#[tokio::test]
async fn save_load_round_trip_in_immutable_secrets() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-rt").await;
    let store = RevisionStore::new(client.clone(), &ns);
    // A name longer than a label value: the label is a hash, the annotation the full name.
    let long = format!("{}.example.com", "long-bundle-name-".repeat(6));
    assert!(long.len() > 63);
    for bd in ["web", long.as_str()] {
        let rec = record(bd, 1, 3, 200, 7);
        assert!(!store.save(&rec).await.unwrap(), "nothing stored before");
        assert_eq!(store.load(bd, 1).await.unwrap(), rec);
        assert_eq!(store.list(bd).await.unwrap(), vec![1]);

        let secrets = chunk_secrets(&client, &ns, bd, 1).await;
        assert_eq!(secrets.len(), 1);
        let secret = &secrets[0];
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some(secret_name(bd, 1, 0).as_str())
        );
        assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
        assert_eq!(secret.immutable, Some(true));
        let annotations = secret.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[ANNOTATION_REVISION_OF], bd);
        assert_eq!(annotations[ANNOTATION_CHUNKS], "1");
        let labels = secret.metadata.labels.as_ref().unwrap();
        assert!(labels[LABEL_REVISION_OF].len() <= 63);
        assert!(!labels.contains_key("pallet.dev/bundle-deployment"));

        // Saving again writes nothing: the same Secrets (same UIDs) remain.
        assert!(store.save(&rec).await.unwrap(), "found stored already");
        assert_eq!(
            uids(&chunk_secrets(&client, &ns, bd, 1).await),
            uids(&secrets)
        );

        // The API server enforces immutability: the data cannot be changed in place.
        let name = secret.metadata.name.clone().unwrap();
        let refused = Api::<Secret>::namespaced(client.clone(), &ns)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {DATA_KEY: "AAAA"}})),
            )
            .await;
        match refused {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(status.message.contains("immutable"), "{}", status.message);
            }
            other => panic!("changing an immutable Secret's data was not refused: {other:?}"),
        }
    }
    // Loading a revision never saved says which one and where.
    let e = store.load("web", 9).await.unwrap_err();
    assert!(
        matches!(e, RevisionError::NotFound { number: 9, .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("revision 9 of BundleDeployment web"),
        "{e}"
    );
    assert_eq!(e.category(), "RevisionNotFound");
    cleanup(&client, &ns).await;
}

#[tokio::test]
async fn a_five_megabyte_bundle_stores_in_several_chunks() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-big").await;
    let store = RevisionStore::new(client.clone(), &ns);
    let rec = record("big", 4, 50, 100_000, 42);
    let rendered = serde_json::to_vec(&rec.objects).unwrap().len();
    assert!(rendered >= 5_000_000, "{rendered}");

    let started = Instant::now();
    store.save(&rec).await.unwrap();
    let saved_in = started.elapsed();
    let started = Instant::now();
    let loaded = store.load("big", 4).await.unwrap();
    let loaded_in = started.elapsed();
    assert!(
        loaded == rec,
        "the restored record differs from the saved one"
    );

    let secrets = chunk_secrets(&client, &ns, "big", 4).await;
    let stored: usize = secrets
        .iter()
        .map(|s| s.data.as_ref().unwrap()[DATA_KEY].0.len())
        .sum();
    assert!(secrets.len() >= 3, "{} chunks", secrets.len());
    for s in &secrets {
        assert!(s.data.as_ref().unwrap()[DATA_KEY].0.len() <= 768 * 1024 + 200);
        assert_eq!(s.immutable, Some(true));
    }
    let size = &secrets[0].metadata.annotations.as_ref().unwrap()[ANNOTATION_SIZE];
    eprintln!(
        "5 MB case: {} objects, {rendered} bytes of rendered JSON -> {size} bytes gzipped \
         ({stored} bytes with chunk headers) in {} Secrets; save {saved_in:?}, load {loaded_in:?}",
        rec.objects.len(),
        secrets.len()
    );
    cleanup(&client, &ns).await;
}

#[tokio::test]
async fn list_delete_and_delete_all() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-ls").await;
    let store = RevisionStore::new(client.clone(), &ns);
    for n in [3, 1, 2] {
        store.save(&record("a", n, 2, 100, n as u64)).await.unwrap();
    }
    // "a-r1" would share a name prefix with "a"'s Secrets; it must not show up in "a"'s list.
    store.save(&record("a-r1", 1, 2, 100, 9)).await.unwrap();
    store.save(&record("b", 1, 2, 100, 9)).await.unwrap();

    assert_eq!(store.list("a").await.unwrap(), vec![1, 2, 3]);
    store.delete("a", 2).await.unwrap();
    assert_eq!(store.list("a").await.unwrap(), vec![1, 3]);
    assert!(matches!(
        store.load("a", 2).await,
        Err(RevisionError::NotFound { .. })
    ));
    assert!(chunk_secrets(&client, &ns, "a", 2).await.is_empty());
    // Deleting what is not there is fine.
    store.delete("a", 2).await.unwrap();
    store.delete("nobody", 1).await.unwrap();

    store.delete_all("a").await.unwrap();
    assert_eq!(store.list("a").await.unwrap(), Vec::<i64>::new());
    assert_eq!(store.list("a-r1").await.unwrap(), vec![1]);
    assert_eq!(store.list("b").await.unwrap(), vec![1]);
    assert_eq!(store.load("b", 1).await.unwrap(), record("b", 1, 2, 100, 9));
    store.delete_all("a").await.unwrap();
    cleanup(&client, &ns).await;
}

/// About 2.5 MB of text: at least two chunks.
fn two_chunk_record(bd: &str, seed: u64) -> RevisionRecord {
    let rec = record(bd, 2, 25, 100_000, seed);
    assert!(encode(&rec).unwrap().len() >= 2);
    rec
}

#[tokio::test]
async fn a_save_interrupted_after_the_first_chunk_is_repaired() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-partial").await;
    let store = RevisionStore::new(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let rec = two_chunk_record("web", 5);
    let count = encode(&rec).unwrap().len();

    // What a save that crashed after its first create leaves: chunk 0 only.
    store.save(&rec).await.unwrap();
    for index in 1..count {
        secrets
            .delete(&secret_name("web", 2, index), &Default::default())
            .await
            .unwrap();
    }
    let e = store.load("web", 2).await.unwrap_err();
    let missing = format!("{ns}/{}", secret_name("web", 2, 1));
    match &e {
        RevisionError::Corrupt {
            secret: Some(secret),
            bundle_deployment: Some(bd),
            number: Some(2),
            ..
        } => {
            assert_eq!(secret, &missing);
            assert_eq!(bd, "web");
        }
        other => panic!("expected Corrupt naming {missing}, got {other}"),
    }
    assert!(e.to_string().contains("is missing"), "{e}");
    assert_eq!(
        store.list("web").await.unwrap(),
        vec![2],
        "a partial revision is listed"
    );

    let kept = uids(&chunk_secrets(&client, &ns, "web", 2).await[..1]);
    store.save(&rec).await.unwrap();
    assert_eq!(store.load("web", 2).await.unwrap(), rec);
    let after = chunk_secrets(&client, &ns, "web", 2).await;
    assert_eq!(after.len(), count);
    assert_eq!(
        uids(&after[..1]),
        kept,
        "the good chunk was kept, not rewritten"
    );
    cleanup(&client, &ns).await;
}

#[tokio::test]
async fn stale_or_damaged_chunks_are_replaced() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-stale").await;
    let store = RevisionStore::new(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);

    // An earlier save of other content for the same number, interrupted: its chunk 0 remains.
    let old = two_chunk_record("web", 11);
    store.save(&old).await.unwrap();
    secrets
        .delete(&secret_name("web", 2, 1), &Default::default())
        .await
        .unwrap();
    let new = two_chunk_record("web", 12);
    assert!(
        store.save(&new).await.unwrap(),
        "an earlier save's chunk is reported as found"
    );
    assert_eq!(store.load("web", 2).await.unwrap(), new);

    // A chunk whose data was damaged (recreated by hand with one byte changed, same metadata).
    let name = secret_name("web", 2, 1);
    let original = secrets.get(&name).await.unwrap();
    secrets.delete(&name, &Default::default()).await.unwrap();
    let mut damaged = original.clone();
    damaged.metadata = kube::api::ObjectMeta {
        name: original.metadata.name.clone(),
        labels: original.metadata.labels.clone(),
        annotations: original.metadata.annotations.clone(),
        ..Default::default()
    };
    let mut data = original.data.clone().unwrap();
    let bytes = &mut data.get_mut(DATA_KEY).unwrap().0;
    let last = bytes.len() - 1;
    bytes[last] ^= 0x20;
    damaged.data = Some(data);
    secrets
        .create(&PostParams::default(), &damaged)
        .await
        .unwrap();
    let e = store.load("web", 2).await.unwrap_err();
    assert!(
        matches!(&e, RevisionError::Corrupt { secret: Some(s), .. } if *s == format!("{ns}/{name}")),
        "{e}"
    );
    assert!(e.to_string().contains("sha256"), "{e}");
    store.save(&new).await.unwrap();
    assert_eq!(store.load("web", 2).await.unwrap(), new);

    // A chunk left by hand without pallet's annotations, in place of chunk 0.
    let first = secret_name("web", 2, 0);
    secrets.delete(&first, &Default::default()).await.unwrap();
    let bare: Secret = serde_json::from_value(json!({
        "metadata": {"name": first, "labels": {LABEL_REVISION_OF: "web", LABEL_REVISION: "2", LABEL_CHUNK: "0"},
                     "annotations": {ANNOTATION_REVISION_OF: "web"}},
        "type": SECRET_TYPE, "immutable": true,
        "data": {DATA_KEY: ByteString(b"junk".to_vec())}
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &bare).await.unwrap();
    let e = store.load("web", 2).await.unwrap_err();
    assert!(matches!(e, RevisionError::Corrupt { .. }), "{e}");
    store.save(&new).await.unwrap();
    assert_eq!(store.load("web", 2).await.unwrap(), new);
    cleanup(&client, &ns).await;
}

/// Saves create their chunks without listing first: chunks past the new save's count, left by
/// an earlier, larger save of the same number whose repair was interrupted, is ignored by `load`
/// and removed with the revision.
#[tokio::test]
async fn a_chunk_left_past_the_count_by_a_larger_save_is_ignored() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-stray").await;
    let store = RevisionStore::new(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let old = two_chunk_record("web", 41);
    store.save(&old).await.unwrap();
    secrets
        .delete(&secret_name("web", 2, 0), &Default::default())
        .await
        .unwrap();
    let new = record("web", 2, 2, 100, 42);
    assert_eq!(encode(&new).unwrap().len(), 1);
    store.save(&new).await.unwrap();
    assert_eq!(
        chunk_secrets(&client, &ns, "web", 2).await.len(),
        encode(&old).unwrap().len(),
        "the new chunk 0 and the old save's later chunks"
    );
    assert_eq!(store.load("web", 2).await.unwrap(), new);
    store.delete("web", 2).await.unwrap();
    assert!(chunk_secrets(&client, &ns, "web", 2).await.is_empty());
    cleanup(&client, &ns).await;
}

#[tokio::test]
async fn concurrent_identical_saves_both_succeed() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-race").await;
    let a = RevisionStore::new(client.clone(), &ns);
    let b = RevisionStore::new(client.clone(), &ns);
    let rec = two_chunk_record("web", 21);
    for _ in 0..3 {
        let (x, y) = tokio::join!(a.save(&rec), b.save(&rec));
        x.unwrap();
        y.unwrap();
        assert_eq!(a.load("web", 2).await.unwrap(), rec);
        a.delete("web", 2).await.unwrap();
    }
    cleanup(&client, &ns).await;
}

/// A Secret of the same name that is not this BundleDeployment's is never overwritten.
#[tokio::test]
async fn a_foreign_secret_in_the_way_is_a_conflict() {
    let client = cluster::client().await;
    let ns = namespace(&client, "rev-foreign").await;
    let store = RevisionStore::new(client.clone(), &ns);
    let name = secret_name("web", 1, 0);
    let foreign = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("password".to_string(), "x".to_string())])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let e = store.save(&record("web", 1, 1, 10, 1)).await.unwrap_err();
    assert!(matches!(e, RevisionError::Conflict { .. }), "{e}");
    assert!(e.to_string().contains(&name), "{e}");
    let still: Secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get(&name)
        .await
        .unwrap();
    assert!(still.data.unwrap().contains_key("password"));
    cleanup(&client, &ns).await;
}
