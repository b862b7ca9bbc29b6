/**
 * A delay that costs nothing to start: `Atomics.waitAsync` with a timeout on a cell nobody
 * notifies. Deno loads its timer code on the first `setTimeout`/`setInterval` of a process
 * (bench/NOTES.md), which a background task such as the zombie scan would add to
 * every run of denit, however short. Like an unref'd timer, a pending delay keeps nothing alive.
 */

const cell = new Int32Array(new SharedArrayBuffer(4));

/** Resolves after about `ms` milliseconds, if the process is still running then. */
export async function quietDelay(ms: number): Promise<void> {
  await Atomics.waitAsync(cell, 0, 0, ms).value;
}
