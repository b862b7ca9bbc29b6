/**
 * Copies every job's output from its pipes into its spool files, on the service's thread:
 * one poll(2) over every pipe (waiting on a thread of the runtime), then non-blocking reads
 * until each pipe is empty. Memory stays one buffer whatever the jobs print.
 */

import {
  closeFd,
  openPipe,
  pollReadable,
  readSome,
  setNonBlocking,
  writeAll,
} from "../sys/pipes.ts";

/** What the pump does with a pipe's bytes. */
export interface Sink {
  /** `length` bytes at the start of `buffer` (valid only during the call). */
  data(buffer: Uint8Array<ArrayBuffer>, length: number): void;
  /** The pipe ended: every process holding its write end is gone (or closed it). */
  end(): void;
}

/** One read's size: the pipe's default capacity. */
const CHUNK = 64 * 1024;
/** Reads from one pipe before the others get a turn. */
const READS_PER_TURN = 16;
const EAGAIN = 11;
const EINTR = 4;

/** The pipes being copied, and the loop that copies them. */
export class Pump {
  readonly #sinks = new Map<number, Sink>();
  readonly #buffer = new Uint8Array(CHUNK);
  readonly #wake: { read: number; write: number };
  readonly #tick = new Uint8Array(1);

  constructor() {
    const wake = openPipe();
    if (typeof wake === "number") throw new Error(`Cannot make the pump's pipe: errno ${-wake}`);
    this.#wake = wake;
    setNonBlocking(wake.read);
    setNonBlocking(wake.write);
    void this.#loop();
  }

  /** Copies the pipe read from `fd` to `sink` until it ends; the pump closes `fd` then. */
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
      if (ready[0]) { while (readSome(this.#wake.read, this.#buffer) > 0) { /* emptied */ } }
      for (let i = 1; i < fds.length; i++) {
        const fd = fds[i];
        if (ready[i] && fd !== undefined) this.#drain(fd);
      }
    }
  }

  #drain(fd: number): void {
    const sink = this.#sinks.get(fd);
    if (sink === undefined) return;
    for (let turn = 0; turn < READS_PER_TURN; turn++) {
      const n = readSome(fd, this.#buffer);
      if (n > 0) {
        sink.data(this.#buffer, n);
        continue;
      }
      if (n === -EAGAIN) return;
      if (n === -EINTR) continue;
      // 0: the end; any other error ends the pipe too (nothing more can come from it).
      this.#sinks.delete(fd);
      closeFd(fd);
      sink.end();
      return;
    }
  }
}
