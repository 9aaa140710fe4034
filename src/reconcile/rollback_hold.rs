//! A requested rollback stays in force: the content it replaced is refused until the spec or
//! the sources change. A rollback requested while paused is carried out at resume, and the
//! sources may have moved during the pause: the content they render when the rollback is
//! carried out is newer than the request, yet no newer than the user's wish to go back. It is
//! recorded as a revision that was never applied (phase RolledBack), so the next pass refuses it
//! like the content the rollback replaced, and `pallet rollback --to` can still bring it in.

use super::content::{fetch_and_render, RenderedBundle};
use super::view::View;
use super::{rollout, values, webhook_certs, Context};
use crate::api::BundleDeploymentStatus;
use crate::revision::{RevisionContent, RevisionRecord};

/// Records what the sources render now (as last resolved: no poll is forced) as refused, when
/// no revision has that content yet. Best effort: when the sources cannot be rendered, nothing
/// is recorded and the rollback goes on.
pub(super) async fn refuse_newer_content(
    view: &View<'_>,
    ctx: &Context,
    work: &mut BundleDeploymentStatus,
    to: i64,
) {
    let (bd, name) = (view.bd, &view.name);
    let RenderedBundle {
        rendered,
        digest,
        sources,
        values_from,
        traces,
        rendered_at,
    } = match fetch_and_render(view, ctx, false).await {
        Ok(done) => done,
        Err(error) => {
            tracing::debug!(bundle_deployment = %name, error = %error, "rollback: the current content is not known; nothing more refused");
            return;
        }
    };
    // As a pass would see it (the webhook CA the agent keeps), read-only.
    let Ok((rendered, digest)) =
        webhook_certs::with_kept_bundle(view.workload, bd, rendered, digest).await
    else {
        return;
    };
    if work.revisions.iter().any(|r| r.digest == digest) {
        return; // a revision of the history: the rollback decides about it
    }
    let number = rollout::next_number(work);
    let generation = view.generation;
    let objects = rendered.object_list();
    let record = RevisionRecord::new(
        name,
        number,
        generation,
        RevisionContent {
            digest: &digest,
            sources: &sources,
            objects: &objects,
            processors: &traces,
        },
    );
    // Stored so that a rollback to it works as to any revision.
    if let Err(error) = ctx.revisions.save(&record).await {
        tracing::warn!(bundle_deployment = %name, revision = number, error = %error, "could not store the content a rollback refuses; it may be applied at the next pass");
        return;
    }
    let spec_digest = values::spec_digest(&bd.spec.digest(), &values_from);
    let message = format!(
        "rendered before the requested rollback to revision {to} was carried out (the request \
         waited, e.g. while paused); not applied: refused until the spec or the sources change, \
         a retry, or a rollback to it"
    );
    rollout::record_refused(
        work,
        rollout::NewRevision {
            number,
            generation,
            spec_digest: &spec_digest,
            digest: &digest,
            sources,
            values_from,
            objects: objects.len(),
            rendered_at,
        },
        &message,
    );
    tracing::info!(bundle_deployment = %name, revision = number, %digest, "content newer than a requested rollback recorded as refused");
}
