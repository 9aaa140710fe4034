//! The image transformer: `images` entries rewrite the name, tag and digest of matching
//! container images, in every `containers`/`initContainers` list of an object (wherever it
//! is) and in the fields the `images` field specs name. CustomResourceDefinitions are left
//! alone.

use regex::Regex;
use serde_json::Value;

use super::error::KustomizeError;
use super::fieldspec::{walk, FieldSpec};
use super::kustomization::Image;
use super::resmap::ResMap;

/// Applies one `images` entry.
pub(crate) fn apply(
    res: &mut ResMap,
    image: &Image,
    specs: &[FieldSpec],
) -> Result<(), KustomizeError> {
    // kustomize builds the pattern from the name unescaped; a name that is no valid
    // expression matches nothing.
    let pattern = Regex::new(&format!(
        "^{}(:[a-zA-Z0-9_.{{}}-]*)?(@sha256:[a-zA-Z0-9_.{{}}-]*)?$",
        image.name
    ))
    .ok();
    let Some(pattern) = pattern else {
        return Ok(());
    };
    let update = |text: &str| -> Option<String> { updated_image(text, image, &pattern) };
    for resource in &mut res.resources {
        if resource.kind() == "CustomResourceDefinition" {
            continue;
        }
        let gvk = resource.gvk();
        let mut body = Value::Object(std::mem::take(&mut resource.body));
        let mut result = update_containers(&mut body, &update);
        if result.is_ok() {
            for spec in specs.iter().filter(|s| s.selects(&gvk)) {
                result = walk(&mut body, spec, None, &mut |node| match node {
                    Value::String(text) => {
                        if let Some(new) = update(text) {
                            *text = new;
                        }
                        Ok(())
                    }
                    Value::Object(_) | Value::Array(_) => {
                        Err(KustomizeError::invalid("an image field must be a scalar"))
                    }
                    _ => Ok(()),
                });
                if result.is_err() {
                    break;
                }
            }
        }
        if let Value::Object(map) = body {
            resource.body = map;
        }
        result?;
    }
    Ok(())
}

/// Every `containers`/`initContainers` list anywhere in the object: each element's `image`.
fn update_containers(
    node: &mut Value,
    update: &dyn Fn(&str) -> Option<String>,
) -> Result<(), KustomizeError> {
    match node {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                update_containers(value, update)?;
                if key == "containers" || key == "initContainers" {
                    if let Value::Array(items) = value {
                        for item in items {
                            match item.get_mut("image") {
                                Some(Value::String(text)) => {
                                    if let Some(new) = update(text) {
                                        *text = new;
                                    }
                                }
                                Some(Value::Object(_)) | Some(Value::Array(_)) => {
                                    return Err(KustomizeError::invalid(
                                        "an image field must be a scalar",
                                    ))
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for item in items {
                update_containers(item, update)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The new image reference for `text`, when the entry's name matches it.
fn updated_image(text: &str, image: &Image, pattern: &Regex) -> Option<String> {
    if !pattern.is_match(text) {
        return None;
    }
    let (mut name, mut tag, mut digest) = split(text);
    if !image.new_name.is_empty() {
        name = image.new_name.clone();
    }
    if !image.new_tag.is_empty() && !image.digest.is_empty() {
        tag = image.new_tag.clone();
        digest = image.digest.clone();
    } else if !image.new_tag.is_empty() {
        tag = image.new_tag.clone();
        digest.clear();
    } else if !image.digest.is_empty() {
        tag.clear();
        digest = image.digest.clone();
    } else if !image.tag_suffix.is_empty() {
        tag.push_str(&image.tag_suffix);
        digest.clear();
    }
    let mut out = name;
    if !tag.is_empty() {
        out.push(':');
        out.push_str(&tag);
    }
    if !digest.is_empty() {
        out.push('@');
        out.push_str(&digest);
    }
    Some(out)
}

/// Splits an image reference into name, tag and digest as kustomize does (a `:` before the
/// first `/` is a registry port, not a tag).
pub(crate) fn split(image: &str) -> (String, String, String) {
    let slash = image.find('/').filter(|i| *i > 0).unwrap_or(0);
    let search = &image[slash..];
    let at = search.find('@');
    let colon = search.find(':');
    match (at, colon) {
        (None, None) => (image.to_owned(), String::new(), String::new()),
        (Some(a), c) if c.is_none_or(|c| a < c) => {
            let a = a + slash;
            (
                image[..a].to_owned(),
                String::new(),
                image[a + 1..].to_owned(),
            )
        }
        (Some(a), Some(c)) => {
            let (a, c) = (a + slash, c + slash);
            (
                image[..c].to_owned(),
                image[c + 1..a].to_owned(),
                image[a + 1..].to_owned(),
            )
        }
        (None, Some(c)) => {
            let c = c + slash;
            (
                image[..c].to_owned(),
                image[c + 1..].to_owned(),
                String::new(),
            )
        }
        (Some(_), None) => (image.to_owned(), String::new(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(name: &str, new_name: &str, new_tag: &str, digest: &str) -> Image {
        Image {
            name: name.into(),
            new_name: new_name.into(),
            new_tag: new_tag.into(),
            digest: digest.into(),
            ..Image::default()
        }
    }

    #[test]
    fn references_split_and_update_as_kustomize_does() {
        assert_eq!(
            split("reg:5000/app:v1@sha256:x"),
            ("reg:5000/app".into(), "v1".into(), "sha256:x".into())
        );
        assert_eq!(split("nginx"), ("nginx".into(), "".into(), "".into()));
        assert_eq!(
            split("nginx@sha256:a"),
            ("nginx".into(), "".into(), "sha256:a".into())
        );
        let entry = image("nginx", "my/nginx", "1.2", "");
        let pattern =
            Regex::new("^nginx(:[a-zA-Z0-9_.{}-]*)?(@sha256:[a-zA-Z0-9_.{}-]*)?$").unwrap();
        assert_eq!(
            updated_image("nginx:1.0", &entry, &pattern).as_deref(),
            Some("my/nginx:1.2")
        );
        assert_eq!(updated_image("nginxx:1.0", &entry, &pattern), None);
        let digest = image("nginx", "", "", "sha256:abc");
        assert_eq!(
            updated_image("nginx:1.0", &digest, &pattern).as_deref(),
            Some("nginx@sha256:abc")
        );
    }
}
