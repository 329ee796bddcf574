/**
 * The INSTANCE column of the cluster view. Rows carry the instance they belong to and whether it
 * is alive; the column is shown only when the rows come from more than one instance, so the
 * output of a single orchestrator reads as it always did.
 */
export interface InstanceMarked {
  /** Absent from servers that predate the cluster view. */
  instance?: string;
  instanceState?: string;
}

/** More than one instance among the rows. */
export function manyInstances(rows: readonly InstanceMarked[]): boolean {
  return new Set(rows.map((r) => r.instance).filter((i) => i !== undefined)).size > 1;
}

/** The instance as a cell: its id, and its state when it is not alive ("gb-1 (dead)"). */
export function instanceCell(r: InstanceMarked): string {
  if (r.instance === undefined) return '-';
  return r.instanceState && r.instanceState !== 'alive' ? `${r.instance} (${r.instanceState})` : r.instance;
}

/** Tell the reader when the answer holds the answering instance's rows only (the database was away). */
export function warnIfPartial(answer: { peersUnavailable?: string }): void {
  if (answer.peersUnavailable)
    process.stderr.write(`warning: ${answer.peersUnavailable}; showing the answering instance only\n`);
}
