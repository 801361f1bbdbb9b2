//! Kind `command`: a local command per turn, in its own process group, bounded (see the
//! module documentation of [`super`]).

use super::{
    agent_message, text_of, Arc, Artifact, AsyncReadExt, AsyncWriteExt, BoxFuture, Duration,
    Handler, HandlerError, Outcome, Part, PathBuf, Stdio, Turn, Updates,
};

/// Most standard error kept from a failed command.
const MAX_STDERR: usize = 4096;

fn text_artifact(name: &str, text: String) -> Artifact {
    Artifact {
        artifact_id: uuid::Uuid::new_v4().to_string(),
        name: Some(name.to_string()),
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
    }
}

/// Runs a local command per turn.
#[derive(Debug)]
pub(super) struct CommandAgent {
    pub(super) argv: Vec<String>,
    /// Its whole environment.
    pub(super) env: Arc<std::collections::BTreeMap<String, String>>,
    /// Its working directory.
    pub(super) work: Arc<PathBuf>,
    pub(super) timeout: Duration,
    pub(super) max_output: usize,
}

/// Read at most `max` bytes; `Err` with what was read if there was more.
async fn read_capped(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
    max: usize,
) -> std::io::Result<Result<Vec<u8>, Vec<u8>>> {
    let mut out = Vec::new();
    (&mut *r).take(max as u64 + 1).read_to_end(&mut out).await?;
    if out.len() > max {
        out.truncate(max);
        return Ok(Err(out));
    }
    Ok(Ok(out))
}

/// A command's process group (the command leads it), killed when the turn ends however it ends
/// (done, failed, timed out, canceled, or its future dropped): nothing the command started in
/// the background outlives its turn. `kill_on_drop` alone kills only the command itself.
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let Ok(pgid) = libc::pid_t::try_from(self.0) else {
            return;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; a negative pid
        // names the process group. The group is ours: the command was started as its leader,
        // and its id cannot be reused while any member lives.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

impl Handler for CommandAgent {
    fn handle(
        &self,
        turn: Turn,
        _updates: Updates,
    ) -> BoxFuture<'static, Result<Outcome, HandlerError>> {
        let argv = self.argv.clone();
        let env = self.env.clone();
        let work = self.work.clone();
        let timeout = self.timeout;
        let max = self.max_output;
        Box::pin(async move {
            let input = text_of(&turn.message);
            // Nothing of the node's environment (its secrets, its AGENTNET_* settings) or
            // working directory reaches the command; PATH (in `env`) also finds argv[0].
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .env_clear()
                .envs(env.iter())
                .current_dir(work.as_path())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .process_group(0)
                .spawn()
                .map_err(|e| HandlerError(format!("starting {}: {e}", argv[0])))?;
            let _group = child.id().map(ProcessGroup);
            let mut stdin = child.stdin.take();
            let mut stdout = child
                .stdout
                .take()
                .ok_or_else(|| HandlerError("no stdout".into()))?;
            let mut stderr = child
                .stderr
                .take()
                .ok_or_else(|| HandlerError("no stderr".into()))?;
            let work = async {
                let feed = async {
                    if let Some(mut s) = stdin.take() {
                        // A command that does not read its input is fine.
                        let _ = s.write_all(input.as_bytes()).await;
                        let _ = s.shutdown().await;
                    }
                };
                // Standard error is read all along (a command must not block on a full pipe),
                // but only standard output decides when we stop waiting: past its cap the task
                // fails at once, whatever standard error does (it was read to its end before,
                // so a command writing without end waited for the timeout).
                let out_side = async { tokio::join!(feed, read_capped(&mut stdout, max)).1 };
                let err_side = read_capped(&mut stderr, MAX_STDERR);
                tokio::pin!(out_side, err_side);
                let mut err = None;
                let out = loop {
                    tokio::select! {
                        o = &mut out_side => break o,
                        e = &mut err_side, if err.is_none() => err = Some(e),
                    }
                };
                if matches!(out, Ok(Err(_))) {
                    return (out, err.unwrap_or(Ok(Ok(Vec::new()))));
                }
                let err = match err {
                    Some(e) => e,
                    None => err_side.await,
                };
                (out, err)
            };
            let (out, err) = tokio::select! {
                r = work => r,
                _ = turn.cancel.cancelled() => {
                    let _ = child.kill().await;
                    return Err(HandlerError("canceled".into()));
                }
                _ = tokio::time::sleep(timeout) => {
                    let _ = child.kill().await;
                    return Ok(Outcome::Failed {
                        message: agent_message(&turn, format!("the command took longer than {} s and was stopped", timeout.as_secs())),
                    });
                }
            };
            let out = out.map_err(|e| HandlerError(format!("reading output: {e}")))?;
            let Ok(out) = out else {
                let _ = child.kill().await;
                return Ok(Outcome::Failed {
                    message: agent_message(
                        &turn,
                        format!("the command wrote more than {max} bytes"),
                    ),
                });
            };
            let status = tokio::select! {
                s = child.wait() => s.map_err(|e| HandlerError(format!("waiting: {e}")))?,
                _ = tokio::time::sleep(timeout) => {
                    let _ = child.kill().await;
                    return Err(HandlerError("the command did not exit".into()));
                }
            };
            if !status.success() {
                let err = err
                    .ok()
                    .map(|r| r.unwrap_or_else(|e| e))
                    .unwrap_or_default();
                return Ok(Outcome::Failed {
                    message: agent_message(
                        &turn,
                        format!(
                            "the command failed ({status}): {}",
                            String::from_utf8_lossy(&err).trim()
                        ),
                    ),
                });
            }
            Ok(Outcome::Completed {
                message: None,
                artifacts: vec![text_artifact(
                    "output",
                    String::from_utf8_lossy(&out).into_owned(),
                )],
            })
        })
    }
}
