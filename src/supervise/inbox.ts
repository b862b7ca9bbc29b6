/**
 * The signal inbox: listeners for every forwarded signal, installed by the entry module before
 * anything else is loaded, so that a `docker stop` in denit's first milliseconds is kept rather
 * than dropped (as PID 1, a signal without a handler is discarded by the kernel; as a
 * subreaper, SIGTERM at its default would kill denit and orphan the child). Signals that
 * arrive before the supervisor takes the inbox wait in arrival order.
 *
 * The order matters. The runtime's first `Deno.addSignalListener`, whatever its signal,
 * installs its own handler for HUP, INT and TERM at once (deno_signals `init()`); until a JS
 * listener exists for one of those three, the runtime treats it as unhandled and re-raises it
 * at its default disposition, which ends a subreaper denit and, as PID 1, left the runtime in
 * a state that crashed it (SIGSEGV, measured). So TERM, INT and HUP are registered first, back
 * to back; only then does denit take its name (the handshake a test waits for), and then the
 * other forwarded signals, each of which stays at its default until its own listener exists.
 */

import { RUNTIME_ARMED_SIGNALS } from "../common/signals.ts";
import { FORWARDED, type SignalPolicy } from "./signals.ts";

/** Receives signal numbers in arrival order. */
export type SignalConsumer = (signo: number) => void;

/** The signals the runtime's first listener arms together, registered before any other. */
const FIRST_SIGNALS: readonly string[] = RUNTIME_ARMED_SIGNALS;

/** The forwarded signals in the order their listeners are installed. */
export function listenOrder(rows: readonly SignalPolicy[] = FORWARDED): SignalPolicy[] {
  const rank = (row: SignalPolicy) => {
    const index = FIRST_SIGNALS.indexOf(row.name);
    return index < 0 ? FIRST_SIGNALS.length : index;
  };
  return [...rows].sort((a, b) => rank(a) - rank(b) || a.signo - b.signo);
}

/**
 * The name `ps` shows for denit, set once TERM, INT and HUP have their listeners. Its bytes:
 * `Deno.writeFileSync` with them took two thirds of `Deno.writeTextFileSync`'s 0.16 ms at start.
 */
const PROCESS_NAME = Uint8Array.from("denit", (c) => c.charCodeAt(0));

/** The listeners and what they kept. */
export class SignalInbox {
  readonly #pending: number[] = [];
  readonly #listeners: Array<[Deno.Signal, () => void]> = [];
  #consumer: SignalConsumer | null = null;

  private constructor() {}

  /** Installs a listener for each forwarded signal: TERM, INT and HUP first. */
  static open(): SignalInbox {
    const inbox = new SignalInbox();
    for (const row of listenOrder()) {
      const listener = () => inbox.#receive(row.signo);
      Deno.addSignalListener(row.name, listener);
      inbox.#listeners.push([row.name, listener]);
      if (inbox.#listeners.length === FIRST_SIGNALS.length) nameProcess();
    }
    return inbox;
  }

  #receive(signo: number): void {
    if (this.#consumer === null) this.#pending.push(signo);
    else this.#consumer(signo);
  }

  /** The signals listened to. */
  get signals(): number[] {
    return listenOrder().map((row) => row.signo);
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

/**
 * The main thread's name (what ps and top show): "denit", not the runtime's "deno". Written to
 * /proc/self/comm, which needs no C library; it also tells an observer that a stop signal sent
 * from now on is kept.
 */
function nameProcess(): void {
  try {
    Deno.writeFileSync("/proc/self/comm", PROCESS_NAME);
  } catch {
    // No /proc mounted: ps shows the runtime's name, and nothing else depends on it.
  }
}
