//! The restart: tasks the last run left `SUBMITTED` or `WORKING` are failed with
//! [`RESTART_MESSAGE`] ("Restart" in [`super`]'s module doc).

use agentnet_a2a::store::StoreError;
use agentnet_a2a::types::{Message, Part, Role, Task, TaskState};
use agentnet_discovery::store::FamilyOp;

use super::keys::{is_running, Scope};
use super::sweep::SWEEP_BATCH;
use super::write::Write;
use super::{backend, TaskDb};

/// The status message of a task failed by a restart.
pub const RESTART_MESSAGE: &str = "the node restarted while this task was working";

impl TaskDb {
    /// Mark every task left `SUBMITTED` or `WORKING` by the previous run `FAILED` (see the
    /// module doc). Returns how many. Call before serving. An unreadable record is
    /// quarantined (see [`TaskDb::quarantined`]), never a reason to fail.
    pub fn recover(&self) -> Result<usize, StoreError> {
        self.recover_sealed(&|_, _, _| {})
    }

    /// [`TaskDb::recover`], passing each task it fails to `seal` (agent, the owner's DID if
    /// it has one, the task) before it is written: the node signs its receipt there, as
    /// [`TaskStore::seal`] does for the engine's writes.
    ///
    /// [`TaskStore::seal`]: agentnet_a2a::store::TaskStore::seal
    pub fn recover_sealed(
        &self,
        seal: &dyn Fn(&str, Option<&str>, &mut Task),
    ) -> Result<usize, StoreError> {
        let mut n = 0;
        loop {
            let mut batch = Vec::new();
            self.index
                .scan(b"l", b"m", SWEEP_BATCH, |k, _| {
                    batch.push(k[1..].to_vec());
                    true
                })
                .map_err(backend)?;
            if batch.is_empty() {
                return Ok(n);
            }
            for tail in batch {
                let Some((scope, id)) = Scope::split(&tail) else {
                    self.index
                        .write(vec![FamilyOp::Delete([&b"l"[..], &tail].concat())])
                        .map_err(backend)?;
                    continue;
                };
                match self.load(&scope, &id)? {
                    Some(mut task) if is_running(&task.status.state) => {
                        let old = task.status.clone();
                        let mut m = Message::new(Role::Agent, vec![Part::text(RESTART_MESSAGE)]);
                        m.task_id = Some(task.id.clone());
                        m.context_id = Some(task.context_id.clone());
                        task.status.state = TaskState::Failed;
                        task.status.message = Some(m);
                        task.status.timestamp = Some(chrono::Utc::now());
                        let (agent, owner) = scope.describe();
                        seal(&agent, owner.strip_prefix("c:"), &mut task);
                        match self.write_task(&scope, &task, Write::Update(&old)) {
                            Ok(()) => {}
                            // Growth refused (disk low, a byte bound): fail it without the
                            // message rather than leave it working.
                            Err(StoreError::Refused(_)) => {
                                task.status.message = None;
                                self.write_task(&scope, &task, Write::Update(&old))?;
                            }
                            Err(e) => return Err(e),
                        }
                        n += 1;
                    }
                    // A stale entry (or a record just quarantined): drop it.
                    _ => self
                        .index
                        .write(vec![FamilyOp::Delete(scope.live_key(&id))])
                        .map_err(backend)?,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosted::tasks::fixtures::{open, task};
    use crate::hosted::tasks::Retention;
    use agentnet_a2a::auth::Owner;
    use agentnet_a2a::store::TaskStore;

    #[test]
    fn restart_fails_working_tasks_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let o = Owner::Caller("did:key:o".into());
        {
            let (s, db) = open(dir.path(), Retention::default());
            let a = db.agent("echo");
            a.put(&o, &task("working", 10, TaskState::Working)).unwrap();
            a.put(&o, &task("submitted", 11, TaskState::Submitted))
                .unwrap();
            a.put(&o, &task("done", 12, TaskState::Completed)).unwrap();
            a.put(&o, &task("canceled", 13, TaskState::Canceled))
                .unwrap();
            a.put(&o, &task("asking", 14, TaskState::InputRequired))
                .unwrap();
            s.flush().unwrap();
        }
        let (_s, db) = open(dir.path(), Retention::default());
        assert_eq!(db.recover().unwrap(), 2);
        assert_eq!(db.recover().unwrap(), 0, "recovery is done once");
        let a = db.agent("echo");
        let state = |id: &str| a.get(&o, id).unwrap().unwrap().status.state;
        assert_eq!(state("working"), TaskState::Failed);
        assert_eq!(state("submitted"), TaskState::Failed);
        assert_eq!(state("done"), TaskState::Completed);
        assert_eq!(state("canceled"), TaskState::Canceled);
        assert_eq!(state("asking"), TaskState::InputRequired);
        assert_eq!(db.len(), 5);
    }
}
