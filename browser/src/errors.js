// Why a replica stopped, classified as the Node package's errors are: `kind` is a stable name,
// `action` what to do.

/** A replica that stopped following its stream. */
export class UrsulaReplicaError extends Error {
  /**
   * @param {string} message
   * @param {{ kind: string, action: "retry" | "reattach" | "fix", cause?: unknown }} info
   */
  constructor(message, { kind, action, cause }) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "UrsulaReplicaError";
    this.kind = kind;
    this.action = action;
  }
}
