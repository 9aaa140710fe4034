//! Signatures of git objects: a commit's `gpgsig` header, an annotated tag's trailing signature
//! block; OpenPGP or SSH, checked against the keys of a Secret.

use git2::{Oid, Repository};

use super::openpgp::Keyring;
use crate::api::{GitVerifyMode, VerifiedSignature};

const PGP_BEGIN: &str = "-----BEGIN PGP SIGNATURE-----";
const SSH_BEGIN: &str = "-----BEGIN SSH SIGNATURE-----";

/// The keys a git signature may verify with.
pub struct GitKeys {
    openpgp: Option<Keyring>,
    ssh: Vec<ssh_key::PublicKey>,
}

impl GitKeys {
    /// Reads a Secret's entries: armored or binary OpenPGP keys, SSH public-key lines, or both.
    pub fn read(material: &[(String, Vec<u8>)]) -> Result<GitKeys, String> {
        let ssh = super::ssh::read_keys(material)?;
        let pgp_entries: Vec<(String, Vec<u8>)> = material
            .iter()
            .filter(|(_, data)| {
                let text = String::from_utf8_lossy(data);
                text.contains("-----BEGIN PGP PUBLIC KEY BLOCK-----")
                    || std::str::from_utf8(data).is_err()
            })
            .cloned()
            .collect();
        let openpgp = if pgp_entries.is_empty() {
            None
        } else {
            Some(Keyring::read(&pgp_entries)?)
        };
        if openpgp.is_none() && ssh.is_empty() {
            return Err("the Secret holds no OpenPGP or SSH public key".into());
        }
        Ok(GitKeys { openpgp, ssh })
    }

    /// Verifies an armored signature of `data`; returns the method (`openpgp`, `ssh`) and the
    /// signing key's fingerprint.
    fn verify(&self, signature: &str, data: &[u8]) -> Result<(&'static str, String), String> {
        let trimmed = signature.trim_start();
        if trimmed.starts_with(SSH_BEGIN) {
            if self.ssh.is_empty() {
                return Err(
                    "no key matched: an SSH signature, and the Secret holds no SSH key".into(),
                );
            }
            return super::ssh::verify(&self.ssh, trimmed, data).map(|f| ("ssh", f));
        }
        if trimmed.starts_with(PGP_BEGIN) {
            let Some(keyring) = &self.openpgp else {
                return Err(
                    "no key matched: an OpenPGP signature, and the Secret holds no OpenPGP key"
                        .into(),
                );
            };
            return keyring
                .verify_detached(trimmed, data)
                .map(|f| ("openpgp", f));
        }
        Err("an unsupported kind of signature (OpenPGP and SSH are supported, not X.509)".into())
    }
}

/// A commit's signature and the bytes it signs; `None` when unsigned.
fn commit_signature(repo: &Repository, commit: Oid) -> Result<Option<(String, Vec<u8>)>, String> {
    match repo.extract_signature(&commit, None) {
        Ok((signature, signed)) => Ok(Some((
            String::from_utf8_lossy(&signature).into_owned(),
            signed.to_vec(),
        ))),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(format!("commit {commit}: {}", e.message())),
    }
}

/// An annotated tag's signature (the armored block ending its message) and the bytes before it;
/// `None` when unsigned.
fn tag_signature(repo: &Repository, tag: Oid) -> Result<Option<(String, Vec<u8>)>, String> {
    let odb = repo.odb().map_err(|e| e.message().to_string())?;
    let object = odb
        .read(tag)
        .map_err(|e| format!("tag object {tag}: {}", e.message()))?;
    if object.kind() != git2::ObjectType::Tag {
        return Err(format!(
            "signature missing: the tag is a lightweight tag ({tag} is a {}), with no tag object to sign",
            object.kind().str()
        ));
    }
    let data = object.data();
    let text = String::from_utf8_lossy(data);
    let start = [PGP_BEGIN, SSH_BEGIN]
        .iter()
        .filter_map(|marker| {
            text.match_indices(marker)
                .map(|(i, _)| i)
                .filter(|&i| i == 0 || text.as_bytes()[i - 1] == b'\n')
                .last()
        })
        .max();
    Ok(start.map(|i| (text[i..].to_string(), data[..i].to_vec())))
}

/// How many tags deep a tag may point at its commit (a tag of a tag of a commit is 2).
const MAX_TAG_CHAIN: usize = 8;

/// Refuses a tag object that does not name `commit`: its `object` header, through any tags it
/// names, must be the commit that is deployed. A server advertises a tag's peeled value
/// itself; a genuinely signed old tag advertised as peeling to another commit must not vouch
/// for that commit.
fn check_tag_names(repo: &Repository, tag: Oid, commit: Oid) -> Result<(), String> {
    let mut current = tag;
    for _ in 0..MAX_TAG_CHAIN {
        let object = repo
            .find_tag(current)
            .map_err(|e| format!("tag object {current}: {}", e.message()))?;
        let target = object.target_id();
        match object.target_type() {
            Some(git2::ObjectType::Tag) => current = target,
            Some(git2::ObjectType::Commit) if target == commit => return Ok(()),
            Some(git2::ObjectType::Commit) => {
                return Err(format!(
                    "tag object {tag} is signed for commit {target}, not for commit {commit}, \
                     which the server advertised as the tag's commit"
                ))
            }
            other => {
                return Err(format!(
                    "tag object {tag} points at a {}, not at a commit",
                    other.map_or("nothing", |t| t.str())
                ))
            }
        }
    }
    Err(format!(
        "tag object {tag} names its commit through more than {MAX_TAG_CHAIN} tags"
    ))
}

/// Verifies what `mode` asks of `commit` and `tag` (the tag object a tag ref pointed at): a
/// verified tag must name `commit` itself.
pub fn verify(
    repo: &Repository,
    commit: Oid,
    tag: Option<Oid>,
    mode: GitVerifyMode,
    keys: &GitKeys,
) -> Result<VerifiedSignature, String> {
    let mut signers = Vec::new();
    if matches!(mode, GitVerifyMode::Tag | GitVerifyMode::TagAndHEAD) {
        let tag = tag.ok_or("signature missing: the ref is not a tag")?;
        let (signature, data) = tag_signature(repo, tag)?
            .ok_or_else(|| format!("signature missing: tag object {tag} is not signed"))?;
        let signer = keys
            .verify(&signature, &data)
            .map_err(|e| format!("tag object {tag}: {e}"))?;
        check_tag_names(repo, tag, commit)?;
        signers.push(signer);
    }
    if matches!(mode, GitVerifyMode::Head | GitVerifyMode::TagAndHEAD) {
        let (signature, data) = commit_signature(repo, commit)?
            .ok_or_else(|| format!("signature missing: commit {commit} is not signed"))?;
        let signer = keys
            .verify(&signature, &data)
            .map_err(|e| format!("commit {commit}: {e}"))?;
        signers.push(signer);
    }
    let methods: Vec<&str> = signers.iter().map(|(m, _)| *m).collect();
    let mut fingerprints: Vec<String> = signers.iter().map(|(_, f)| f.clone()).collect();
    fingerprints.dedup();
    let mut method_names = methods.clone();
    method_names.dedup();
    Ok(VerifiedSignature {
        method: format!("git {}", method_names.join("+")),
        signed: Some(
            match mode {
                GitVerifyMode::Head => "commit",
                GitVerifyMode::Tag => "tag",
                GitVerifyMode::TagAndHEAD => "tag and commit",
            }
            .into(),
        ),
        key: Some(fingerprints.join(", ")),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_commits_and_lightweight_tags_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example").unwrap();
        let tree_id = repo.index().unwrap().write_tree().unwrap();
        let tree = repo.find_tree(tree_id).unwrap();
        let commit = repo.commit(None, &sig, &sig, "m", &tree, &[]).unwrap();
        let keys = GitKeys {
            openpgp: None,
            ssh: Vec::new(),
        };
        let err = verify(&repo, commit, None, GitVerifyMode::Head, &keys).unwrap_err();
        assert!(
            err.contains("signature missing") && err.contains("not signed"),
            "{err}"
        );
        let err = verify(&repo, commit, None, GitVerifyMode::Tag, &keys).unwrap_err();
        assert!(err.contains("not a tag"), "{err}");
        let err = verify(&repo, commit, Some(commit), GitVerifyMode::Tag, &keys).unwrap_err();
        assert!(err.contains("lightweight"), "{err}");
        let tag = repo
            .tag(
                "v1",
                &repo.find_object(commit, None).unwrap(),
                &sig,
                "rel",
                false,
            )
            .unwrap();
        let err = verify(&repo, commit, Some(tag), GitVerifyMode::Tag, &keys).unwrap_err();
        assert!(err.contains("is not signed"), "{err}");
    }

    #[test]
    fn a_tag_must_name_the_commit_deployed() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example").unwrap();
        let tree_id = repo.index().unwrap().write_tree().unwrap();
        let tree = repo.find_tree(tree_id).unwrap();
        let old = repo.commit(None, &sig, &sig, "old", &tree, &[]).unwrap();
        let new = repo
            .commit(
                None,
                &sig,
                &sig,
                "new",
                &tree,
                &[&repo.find_commit(old).unwrap()],
            )
            .unwrap();
        let tag = repo
            .tag(
                "v1",
                &repo.find_object(old, None).unwrap(),
                &sig,
                "rel",
                false,
            )
            .unwrap();
        check_tag_names(&repo, tag, old).unwrap();
        let err = check_tag_names(&repo, tag, new).unwrap_err();
        assert!(
            err.contains(&format!("signed for commit {old}, not for commit {new}")),
            "{err}"
        );
        // A tag of the tag names the commit through it.
        let outer = repo
            .tag(
                "v1-outer",
                &repo.find_object(tag, None).unwrap(),
                &sig,
                "re",
                false,
            )
            .unwrap();
        check_tag_names(&repo, outer, old).unwrap();
        assert!(check_tag_names(&repo, outer, new).is_err());
    }
}
