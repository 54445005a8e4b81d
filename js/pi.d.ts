// Types of @tonbo/sqlite-ursula/pi. Needs @earendil-works/pi-durable (>=1.0.0 <1.2.0).
import type { SqliteStorage } from "@earendil-works/pi-durable/storage/sqlite";
import type { NodeSqliteStorageOptions } from "@earendil-works/pi-durable/storage/sqlite/node";

/** Pi's node driver settings, and how to attach. */
export type UrsulaPiStorageOptions = NodeSqliteStorageOptions & { readOnly?: boolean };

/**
 * The Ursula error inside a failure Pi reports (its driver's AggregateError around a failed
 * ROLLBACK, its StorageRejected around a read), classified for `file`; else the failure itself.
 */
export function ursulaErrorOf(error: unknown, file: string): unknown;

/**
 * Attaches `file` to `streamUrl` and opens it with Pi's own node driver. Failures of the
 * extension reject with the errors of the root entry (UrsulaFencedError, UrsulaWriteRefusedError, ...).
 */
export function openUrsulaPiStorage(
  file: string,
  streamUrl: string,
  options?: UrsulaPiStorageOptions,
): Promise<SqliteStorage>;
