/**
 * The signal inbox: listeners for every forwarded signal, installed by the entry module before
 * anything else is loaded, so that a `docker stop` in denit's first milliseconds is kept rather
 * than dropped (as PID 1, a signal without a handler is discarded by the kernel; as a
 * subreaper, SIGTERM at its default would kill denit and orphan the child). Signals that
 * arrive before the supervisor takes the inbox wait in arrival order.
 */

import { FORWARDED } from "./signals.ts";

/** Receives signal numbers in arrival order. */
export type SignalConsumer = (signo: number) => void;

/** The listeners and what they kept. */
export class SignalInbox {
  readonly #pending: number[] = [];
  readonly #listeners: Array<[Deno.Signal, () => void]> = [];
  #consumer: SignalConsumer | null = null;

  private constructor() {}

  /** Installs a listener for each forwarded signal. */
  static open(): SignalInbox {
    const inbox = new SignalInbox();
    for (const row of FORWARDED) {
      const listener = () => inbox.#receive(row.signo);
      Deno.addSignalListener(row.name, listener);
      inbox.#listeners.push([row.name, listener]);
    }
    return inbox;
  }

  #receive(signo: number): void {
    if (this.#consumer === null) this.#pending.push(signo);
    else this.#consumer(signo);
  }

  /** Signals kept so far, oldest first. */
  get pending(): readonly number[] {
    return this.#pending;
  }

  /** Hands every kept signal to `consumer`, then each new one as it arrives. */
  take(consumer: SignalConsumer): void {
    this.#consumer = consumer;
    for (let signo = this.#pending.shift(); signo !== undefined; signo = this.#pending.shift()) {
      consumer(signo);
    }
  }

  /** Removes the listeners (denit is about to exit without a child). */
  close(): void {
    for (const [name, listener] of this.#listeners) Deno.removeSignalListener(name, listener);
    this.#listeners.length = 0;
  }
}
