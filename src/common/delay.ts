/**
 * A delay that costs nothing to start (Deno loads its timer code at the first `setTimeout`) and
 * keeps nothing alive: `Atomics.waitAsync` on a cell nobody notifies.
 */

const cell = new Int32Array(new SharedArrayBuffer(4));

/** Resolves after about `ms` milliseconds, if the process is still running then. */
export async function quietDelay(ms: number): Promise<void> {
  await Atomics.waitAsync(cell, 0, 0, ms).value;
}
