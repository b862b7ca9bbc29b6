/**
 * `--ready-when`: tcp, http and file checks every READY_INTERVAL_MS, or sd_notify(3) `notify`
 * (READY=1, STOPPING=1, RELOADING=1, STATUS=), believed only from the child's process tree.
 */

import { randomHex } from "../common/paths.ts";
import { readProcStat } from "../common/proc.ts";
import { probe } from "../common/probe.ts";
import { formatCheck, READY_INTERVAL_MS } from "../common/ready.ts";
import type { PolledCheck, ReadyCheck } from "../common/ready.ts";
import type { DatagramSocket } from "../sys/datagram.ts";

/** What /readyz and /status read. */
export interface ReadyView {
  readonly check: string;
  readonly passing: boolean;
  /** What the last check found ("connected", "HTTP 503", "READY=1"...); null before any. */
  readonly lastResult: string | null;
  readonly checkedAtMs: number | null;
  /** notify: the child's last STATUS= text. */
  readonly status: string | null;
  /** notify: messages ignored because their sender is not in the child's process tree. */
  readonly ignored: number;
}

/** Whether `pid` is `child` or a descendant (pid 0, outside this PID namespace: never). */
function inTreeOf(pid: number, child: number): boolean {
  for (let at = pid, hops = 0; at > 1 && hops < 256; hops++) {
    if (at === child) return true;
    try {
      at = Number(readProcStat(at).field(4));
    } catch {
      return false; // gone before it could be looked at: not provably the child's
    }
  }
  return false;
}

/** The readiness of the application, kept up to date on this thread. */
export class Readiness {
  readonly #check: ReadyCheck;
  #passing = false;
  #lastResult: string | null = null;
  #checkedAtMs: number | null = null;
  #status: string | null = null;
  #ignored = 0;
  /** notify: the socket's name for NOTIFY_SOCKET; null for the other checks. */
  readonly notifySocket: string | null;

  private constructor(check: ReadyCheck, notifySocket: string | null) {
    this.#check = check;
    this.notifySocket = notifySocket;
  }

  /** Starts checking; `notify` binds its socket first (throws if it cannot). */
  static async start(check: ReadyCheck, childPid: () => number | null): Promise<Readiness> {
    if (check.kind !== "notify") {
      const readiness = new Readiness(check, null);
      void readiness.#poll(check);
      return readiness;
    }
    const { DatagramSocket } = await import("../sys/datagram.ts");
    const socket = DatagramSocket.bindAbstract(`denit/notify/${Deno.pid}-${randomHex(6)}`);
    const readiness = new Readiness(check, socket.name);
    void readiness.#listen(socket, childPid);
    return readiness;
  }

  view(): ReadyView {
    return {
      check: formatCheck(this.#check),
      passing: this.#passing,
      lastResult: this.#lastResult,
      checkedAtMs: this.#checkedAtMs,
      status: this.#status,
      ignored: this.#ignored,
    };
  }

  async #poll(check: PolledCheck): Promise<void> {
    for (;;) {
      const started = performance.now();
      const [passing, found] = await probe(check);
      this.#passing = passing;
      this.#lastResult = found;
      this.#checkedAtMs = Date.now();
      const wait = Math.max(0, READY_INTERVAL_MS - (performance.now() - started));
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  async #listen(socket: DatagramSocket, childPid: () => number | null): Promise<void> {
    for (;;) {
      const message = await socket.receive();
      if (message === null) {
        await new Promise((resolve) => setTimeout(resolve, 100)); // a failed receive: retry
        continue;
      }
      const child = childPid();
      if (child !== null && inTreeOf(message.pid, child)) this.#apply(message.text);
      else this.#ignored++;
    }
  }

  /** One notification: newline-separated VARIABLE=VALUE assignments. */
  #apply(message: string): void {
    const seen: string[] = [];
    for (const line of message.split("\n")) {
      const equals = line.indexOf("=");
      if (equals <= 0) continue;
      const key = line.slice(0, equals);
      const value = line.slice(equals + 1);
      if (key === "READY" && value === "1") this.#passing = true;
      else if ((key === "STOPPING" || key === "RELOADING") && value === "1") this.#passing = false;
      else if (key === "STATUS") this.#status = value.slice(0, 200);
      else continue;
      seen.push(key === "STATUS" ? "STATUS" : line);
    }
    if (seen.length === 0) return;
    this.#lastResult = seen.join(" ");
    this.#checkedAtMs = Date.now();
  }
}
