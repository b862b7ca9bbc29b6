/**
 * Moves every job's output from its pipes into its spool files, in the service's process: one
 * poll(2) over every pipe (waiting on a thread of the runtime), then splice(2) until each pipe
 * is empty. The bytes never pass through this process's memory (past the cap, one scratch
 * buffer drops them): memory stays flat whatever the jobs print.
 */

import {
  closeFd,
  openPipe,
  pollReadable,
  readSome,
  setNonBlocking,
  writeAll,
} from "../sys/pipes.ts";

/** What the pump does with a pipe that has something (or has ended). */
export interface Sink {
  /** Takes what the pipe `fd` holds; true when the pipe ended (the pump closes it then). */
  readable(fd: number): boolean;
}

/** The pipes being moved, and the loop that moves them. */
export class Pump {
  readonly #sinks = new Map<number, Sink>();
  readonly #wake: { read: number; write: number };
  readonly #tick = new Uint8Array(64);

  constructor() {
    const wake = openPipe();
    if (typeof wake === "number") throw new Error(`Cannot make the pump's pipe: errno ${-wake}`);
    this.#wake = wake;
    setNonBlocking(wake.read);
    setNonBlocking(wake.write);
    void this.#loop();
  }

  /** Moves the pipe read from `fd` through `sink` until it ends; the pump closes `fd` then. */
  add(fd: number, sink: Sink): void {
    setNonBlocking(fd);
    this.#sinks.set(fd, sink);
    // The poll under way does not know this pipe: wake it, so the next one does.
    writeAll(this.#wake.write, this.#tick, 1);
  }

  async #loop(): Promise<void> {
    for (;;) {
      const fds = [this.#wake.read, ...this.#sinks.keys()];
      const ready = await pollReadable(fds, -1);
      if (ready[0]) { while (readSome(this.#wake.read, this.#tick) > 0) { /* emptied */ } }
      for (let i = 1; i < fds.length; i++) {
        const fd = fds[i];
        const sink = fd === undefined ? undefined : this.#sinks.get(fd);
        if (!ready[i] || fd === undefined || sink === undefined) continue;
        if (!sink.readable(fd)) continue;
        this.#sinks.delete(fd);
        closeFd(fd);
      }
    }
  }
}
