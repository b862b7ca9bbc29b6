/** Shared test helpers: paths, spawning denit for real, reading its output as events. */

import { descendants, otherProcesses } from "../src/supervise/leftovers.ts";
import { assertOk } from "./assert.ts";

export const ROOT = new URL("..", import.meta.url).pathname;
/** The runtime, as `make bundle` lays it out beside the launcher. */
export const DENO = `${ROOT}dist/deno`;
export const FIXTURES = `${ROOT}fixtures`;

/** The user's documentation: the README, then each page of docs/, by file name. */
export const DOCUMENTATION: ReadonlyMap<string, string> = new Map([
  ["README.md", Deno.readTextFileSync(`${ROOT}README.md`)],
  ...[...Deno.readDirSync(`${ROOT}docs`)].map((e) => e.name).filter((n) => n.endsWith(".md"))
    .sort().map((n): [string, string] => [`docs/${n}`, Deno.readTextFileSync(`${ROOT}docs/${n}`)]),
]);
/**
 * The denit under test, the one place every process-level test takes it from: the form users
 * run, dist/denit (the launcher, with the runtime and the bundles beside it, as in the image),
 * or the launcher LANE_DENIT names (the aarch64 lane's, tests/arm64_test.ts). No shell in
 * between (a shell would add PWD).
 */
export const DENIT: readonly string[] = [Deno.env.get("LANE_DENIT") ?? `${ROOT}dist/denit`];

/**
 * What every wait of these helpers is multiplied by: 1, or more where denit runs slower than
 * any test's bound allows for (the arm64 lane sets it: a start under emulation takes seconds).
 * It bounds waits for events, never a figure a test asserts.
 */
export const PATIENCE = Number(Deno.env.get("TEST_PATIENCE") ?? "1");

/**
 * A copy of the form in `dir`: the launcher and the bundles named (the runtime linked), so that
 * a test can leave a file out; returns the argv that runs it.
 */
export async function layOut(
  dir: string,
  bundles: readonly string[] = ["denit.js", "denit-features.js", "denit-jobs.js"],
  mode = 0o755,
): Promise<string[]> {
  for (const file of ["denit", ...bundles]) {
    await Deno.copyFile(`${ROOT}dist/${file}`, `${dir}/${file}`);
    await Deno.chmod(`${dir}/${file}`, mode);
  }
  // A hard link where it can be (the runtime is large); its mode is dist/deno's, 0755.
  await Deno.link(DENO, `${dir}/deno`).catch(() => Deno.copyFile(DENO, `${dir}/deno`));
  return [`${dir}/denit`];
}

/**
 * denit runnable by every user, for tests that drop to another user: a checkout cloned under a
 * private directory (a home, a `mktemp -d`: mode 0700) keeps the runtime and the bundle from
 * everyone else. The form is copied into `dir`, which the caller made readable by all and
 * removes.
 */
export async function denitForAnyUser(dir: string): Promise<string[]> {
  const place = `${dir}/denit-any-user`;
  await Deno.mkdir(place);
  await Deno.chmod(place, 0o755);
  return await layOut(place);
}

/** The bundle alone in `dir` (no optional half, no job service's half beside it). */
export async function bundleAlone(dir: string): Promise<string[]> {
  return await layOut(dir, ["denit.js"]);
}

/** The denit command as one shell word list, for command lines given to sh or script(1). */
export const DENIT_SHELL = DENIT.map((word) => `'${word.replaceAll("'", `'"'"'`)}'`).join(" ");
/**
 * A fixture in C, built static into dist/test/ (once, when its source is newer): it runs in a
 * shell-less image too.
 */
export function staticFixture(name: string): string {
  const out = `${ROOT}dist/test/${name}`;
  const source = `${FIXTURES}/${name}.c`;
  const mtime = (path: string) => {
    try {
      return Deno.statSync(path).mtime?.getTime() ?? 0;
    } catch {
      return 0; // not built yet
    }
  };
  if (mtime(out) > mtime(source)) return out;
  Deno.mkdirSync(`${ROOT}dist/test`, { recursive: true });
  const tmp = `${out}.${Deno.pid}`;
  const built = new Deno.Command("gcc", {
    args: ["-O2", "-Wall", "-Wextra", "-Werror", "-static", "-o", tmp, source],
    stderr: "piped",
  }).outputSync();
  if (!built.success) throw new Error(`gcc ${source}: ${new TextDecoder().decode(built.stderr)}`);
  Deno.renameSync(tmp, out);
  return out;
}

/** The signal echo child: `ready PID PGID`, then one line per signal (fixtures/signal_echo.c). */
export const ECHO = [staticFixture("signal_echo")];
/** unshare flags that make denit PID 1; --kill-child tears the namespace down if unshare dies. */
export const PIDNS = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"];

/** True when this process can create PID namespaces (root, as on the CI machine). */
export const CAN_UNSHARE = (() => {
  try {
    return new Deno.Command("unshare", { args: ["--pid", "--fork", "true"] }).outputSync().success;
  } catch {
    return false; // unshare missing: the namespace tests report the skip.
  }
})();

/** The two ways denit runs: PID 1 of a fresh PID namespace, or a subreaper (`-s`) child. */
export type Mode = "pid1" | "subreaper";

/** Both modes, or only subreaper (with a printed reason) when namespaces are unavailable. */
export const MODES: readonly Mode[] = (() => {
  if (CAN_UNSHARE) return ["pid1", "subreaper"] as const;
  // deno-lint-ignore no-console -- a skipped mode must say why
  console.warn("SKIP pid1 mode: cannot create PID namespaces here (need root and unshare)");
  return ["subreaper"] as const;
})();

/** The argv that runs denit with `args` in `mode`. */
export function denitArgv(mode: Mode, args: readonly string[]): string[] {
  return mode === "pid1" ? [...PIDNS, ...DENIT, ...args] : [...DENIT, "-s", ...args];
}

/** argv[0], which every command line here has. */
export function program(argv: readonly string[]): string {
  const first = argv[0];
  if (first === undefined) throw new Error("empty command line");
  return first;
}

/** Runs to completion; stdout/stderr as text. Bounded: killed after `timeoutMs`. */
export async function run(
  argv: readonly string[],
  options: { stdin?: Uint8Array; env?: Record<string, string>; timeoutMs?: number; cwd?: string } =
    {},
): Promise<{ code: number; signal: Deno.Signal | null; stdout: string; stderr: string }> {
  const { child, pipes } = spawnWithPipes(
    new Deno.Command(program(argv), {
      args: argv.slice(1),
      stdin: options.stdin === undefined ? "null" : "piped",
      stdout: "piped",
      stderr: "piped",
      env: options.env ?? {},
      cwd: options.cwd ?? Deno.cwd(),
    }),
  );
  let exited = false;
  void child.status.then(() => exited = true, () => exited = true);
  // At the deadline: the process, and whatever still holds its output open (an orphan of it,
  // which would keep output() waiting for ever; the run then fails if the process had exited).
  let orphaned = false;
  const timer = setTimeout(() => {
    orphaned = exited;
    try {
      child.kill("SIGKILL");
    } catch {
      // It ended at the deadline's moment: nothing left to kill.
    }
    killPipeHolders(pipes);
  }, (options.timeoutMs ?? 20_000) * PATIENCE);
  if (options.stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(options.stdin);
    await writer.close();
  }
  const out = await child.output();
  clearTimeout(timer);
  if (orphaned) throw new OrphanedPipes();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    signal: out.signal,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

/** The pipes this process holds, as /proc names them ("pipe:[INODE]"). */
function ownPipes(): Set<string> {
  const links = new Set<string>();
  for (const entry of Deno.readDirSync("/proc/self/fd")) {
    try {
      const link = Deno.readLinkSync(`/proc/self/fd/${entry.name}`);
      if (link.startsWith("pipe:")) links.add(link);
    } catch {
      // closed meanwhile
    }
  }
  return links;
}

/**
 * Spawns, and names the pipes the spawn made (the child's stdio: nothing else runs between the
 * two looks, spawn() being synchronous), which its orphans may hold after it exited.
 */
function spawnWithPipes(command: Deno.Command): { child: Deno.ChildProcess; pipes: string[] } {
  const before = ownPipes();
  const child = command.spawn();
  return { child, pipes: [...ownPipes()].filter((link) => !before.has(link)) };
}

/** Kills, by pid, every process whose stdout or stderr is one of `pipes`. */
function killPipeHolders(pipes: readonly string[]): void {
  const holds = (pid: number, fd: number) => {
    try {
      return pipes.includes(Deno.readLinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      return false; // gone, or not ours to read
    }
  };
  cleanup(otherProcesses().filter((pid) => holds(pid, 1) || holds(pid, 2)));
}

/** The output pipes stayed open after the process ended. */
class OrphanedPipes extends Error {
  override message = "the output pipes stayed open after the process ended: an orphan held them";
}

/** A running process whose stdout is read line by line, with bounded waits on lines. */
export class Running {
  readonly child: Deno.ChildProcess;
  readonly lines: string[] = [];
  readonly #stderr: Promise<string>;
  /** Its output pipes as /proc shows them: what an orphan holding them has open. */
  readonly #pipes: readonly string[];
  #waiters: Array<() => void> = [];
  #closed = false;

  constructor(argv: readonly string[], options: { env?: Record<string, string> } = {}) {
    const { child, pipes } = spawnWithPipes(
      new Deno.Command(program(argv), {
        args: argv.slice(1),
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        env: options.env ?? {},
      }),
    );
    this.child = child;
    this.#pipes = pipes;
    void this.#pump();
    this.#stderr = new Response(this.child.stderr).text();
  }

  async #pump(): Promise<void> {
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const chunk of this.child.stdout) {
      buffer += decoder.decode(chunk, { stream: true });
      const parts = buffer.split("\n");
      buffer = parts.pop() ?? "";
      this.lines.push(...parts);
      this.#wake();
    }
    if (buffer !== "") this.lines.push(buffer);
    this.#closed = true;
    this.#wake();
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  /** The line at `index`, which must have arrived. */
  line(index: number): string {
    const text = this.lines[index];
    if (text === undefined) throw new Error(`no line ${index}: ${this.lines.join("|")}`);
    return text;
  }

  /** Waits until a line matches (searching from `from`); returns its index. */
  async waitFor(
    match: RegExp,
    options: { from?: number; timeoutMs?: number } = {},
  ): Promise<number> {
    const deadline = performance.now() + (options.timeoutMs ?? 15_000) * PATIENCE;
    for (;;) {
      const index = this.lines.findIndex((line, i) => i >= (options.from ?? 0) && match.test(line));
      if (index >= 0) return index;
      if (this.#closed) throw new Error(`output ended without ${match}: ${this.lines.join("|")}`);
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`timed out waiting for ${match}: ${this.lines.join("|")}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /**
   * The exit status, killing the process (and every process below it) if it takes longer than
   * `timeoutMs`.
   */
  async status(given = 15_000): Promise<Deno.CommandStatus & { stderr: string }> {
    const timeoutMs = given * PATIENCE;
    const timer = setTimeout(() => this.#killAll(), timeoutMs);
    try {
      const status = await this.child.status;
      return { ...status, stderr: await this.#stderrWithin(timeoutMs) };
    } catch (err: unknown) {
      if (err instanceof OrphanedPipes) throw err;
      // Deno cannot name real-time signals: a process killed by one rejects its status.
      throw new Error(`the process ended in a way Deno cannot report: ${err}`, { cause: err });
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Ends the run in order: SIGTERM (denit forwards it and cleans up its leftovers), then
   * SIGKILL if it is still there after `timeoutMs`. Safe after the process exited.
   */
  async stop(given = 5000): Promise<void> {
    const timeoutMs = given * PATIENCE;
    this.kill("SIGTERM");
    const timer = setTimeout(() => this.#killAll(), timeoutMs);
    await this.child.status.catch(() => {/* reported by status(), if the test asked */});
    clearTimeout(timer);
    await this.#stderrWithin(timeoutMs);
  }

  /**
   * A denit that must be killed leaves its child behind (a failed test's, say): every process
   * below it is listed first (denit's own walk, leftovers.ts), and killed by pid after it.
   */
  #killAll(): void {
    const below = descendants(this.child.pid);
    this.kill("SIGKILL");
    cleanup(below);
  }

  /**
   * Its stderr, once closed. An orphan of denit can hold it open: then the test fails, and
   * every process that holds its output is killed by pid (no longer below denit, they are found
   * by their descriptors).
   */
  async #stderrWithin(timeoutMs: number): Promise<string> {
    let late: ReturnType<typeof setTimeout> | undefined;
    const orphaned = new Promise<null>((resolve) => {
      late = setTimeout(() => resolve(null), timeoutMs);
    });
    const stderr = await Promise.race([this.#stderr, orphaned]);
    clearTimeout(late);
    if (stderr !== null) return stderr;
    killPipeHolders(this.#pipes);
    throw new OrphanedPipes();
  }

  /** Sends a signal, ignoring a process that is already gone. */
  kill(signal: Deno.Signal): void {
    try {
      this.child.kill(signal);
    } catch {
      // Already exited: nothing left to signal.
    }
  }
}

/** The pid of denit itself: the child of unshare in pid1 mode, else the process we started. */
export function denitPid(proc: Running, mode: Mode): number {
  if (mode === "subreaper") return proc.child.pid;
  const children = Deno.readTextFileSync(`/proc/${proc.child.pid}/task/${proc.child.pid}/children`);
  const pid = Number(children.trim().split(" ")[0]);
  if (!(pid > 0)) throw new Error(`unshare has no child yet: "${children}"`);
  return pid;
}

/**
 * The host pid of the process that is `innerPid` in the PID namespace of `anchor` (a host pid).
 * Outside a namespace both are the same.
 */
export function hostPid(anchor: number, innerPid: number): number {
  const namespace = Deno.readLinkSync(`/proc/${anchor}/ns/pid`);
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      if (Deno.readLinkSync(`/proc/${entry.name}/ns/pid`) !== namespace) continue;
      const status = Deno.readTextFileSync(`/proc/${entry.name}/status`);
      const nspid = /^NSpid:\s+(.*)$/m.exec(status)?.[1]?.trim().split(/\s+/) ?? [];
      if (Number(nspid.at(-1)) === innerPid) return Number(entry.name);
    } catch {
      // The process ended while we looked: not the one we want.
    }
  }
  throw new Error(`no process ${innerPid} in the namespace of ${anchor}`);
}

/** Sends a signal to a pid; throws if the process is gone (a test expects it alive). */
export function killPid(pid: number, signal: Deno.Signal): void {
  Deno.kill(pid, signal);
}

/** True while a process with this pid exists (zombies included). */
export function exists(pid: number): boolean {
  try {
    Deno.statSync(`/proc/${pid}`);
    return true;
  } catch {
    return false;
  }
}

/** Kills pids left by a failed test (by pid, never by name). */
export function cleanup(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch {
      // Gone already.
    }
  }
}

/** denit's options for a job service whose socket and spool are in `dir`. */
export function jobsOptions(dir: string): string[] {
  return ["--jobs-socket", `${dir}/jobs.sock`, "--jobs-spool", `${dir}/spool`];
}

/**
 * This process's cgroup v1 directory of `controller` when `file` is in it; null where that
 * controller is not mounted so, or this is not root.
 */
export function cgroupV1(controller: string, file: string): string | null {
  try {
    const line = Deno.readTextFileSync("/proc/self/cgroup").split("\n").find((l) =>
      l.split(":")[1] === controller
    );
    if (line === undefined || Deno.uid() !== 0) return null;
    const dir = `/sys/fs/cgroup/${controller}${line.split(":")[2]}`.replace(/\/$/, "");
    return Deno.statSync(`${dir}/${file}`).isFile ? dir : null;
  } catch {
    return null;
  }
}

/** The memory cgroup v1 directory of this process, or null (not mounted, or not root). */
export const MEMORY_V1 = cgroupV1("memory", "memory.oom_control");

/** argv that moves itself into `cgroup` (cgroup.procs) and then runs what follows it. */
export function inCgroup(cgroup: string): string[] {
  return ["sh", "-c", `echo $$ > ${cgroup}/cgroup.procs && exec "$@"`, "enter-cgroup"];
}

/** The ports freePort() handed out in this process: none is handed out twice. */
const handedOut = new Set<number>();

/**
 * A port for a server a test starts, free now. Taken below the kernel's range for outgoing
 * connections (`ip_local_port_range`): a port from that range, closed before the server binds it,
 * can be taken meanwhile as the source port of any connection on the machine.
 */
export function freePort(): number {
  const range = Deno.readTextFileSync("/proc/sys/net/ipv4/ip_local_port_range");
  const low = Math.min(Number(range.split(/\s+/)[0]), 32768);
  for (let attempt = 0; attempt < 1000; attempt++) {
    const port = low - 1 - Math.floor(Math.random() * Math.min(12_000, low - 1025));
    if (handedOut.has(port)) continue;
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
    } catch {
      continue; // taken
    }
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port below ${low}`);
}

/** A raw HTTP exchange: writes `request` bytes, reads until the server closes or `until` holds. */
export async function rawHttp(
  port: number,
  request: string | Uint8Array,
  options: { hostname?: string; until?: (text: string) => boolean; timeoutMs?: number } = {},
): Promise<string> {
  const conn = await Deno.connect({ hostname: options.hostname ?? "127.0.0.1", port });
  const timer = setTimeout(() => conn.close(), (options.timeoutMs ?? 10_000) * PATIENCE);
  const bytes = typeof request === "string" ? new TextEncoder().encode(request) : request;
  let text = "";
  try {
    await conn.write(bytes);
    const buffer = new Uint8Array(65536);
    for (;;) {
      const n = await conn.read(buffer);
      if (n === null) break;
      text += new TextDecoder().decode(buffer.subarray(0, n));
      if (options.until?.(text)) break;
    }
  } catch {
    // Closed by the timer or reset by the server: the text so far is the answer.
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  }
  return text;
}

/**
 * Polls `predicate` (reads of /proc or of a directory) until it holds; throws at the deadline,
 * so that a test never goes on as if the event had happened.
 */
export async function waitUntil(
  predicate: () => boolean,
  what: string,
  given = 15_000,
): Promise<void> {
  const timeoutMs = given * PATIENCE;
  const deadline = performance.now() + timeoutMs;
  while (!predicate()) {
    if (performance.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/**
 * Steps this machine's wall clock by `seconds` (root, `date -s`): what NTP or a virtual
 * machine's resume does to every process. The step is computed from the monotonic clock, so that
 * two opposite steps leave the clock where it would have been, late by a process start or two.
 */
export class WallClock {
  #steppedBy = 0;
  readonly #epochAtMs = Date.now() - performance.now();

  step(seconds: number): void {
    const steppedBy = this.#steppedBy + seconds;
    const target = (this.#epochAtMs + performance.now()) / 1000 + steppedBy;
    const set = new Deno.Command("date", { args: ["-s", `@${target.toFixed(6)}`], stdout: "null" })
      .outputSync();
    assertOk(set.success, `date -s: ${new TextDecoder().decode(set.stderr)}`);
    this.#steppedBy = steppedBy; // only once it was done: restore() must not undo a failed step
  }

  /** Back to the real time, if a step is left. */
  restore(): void {
    if (this.#steppedBy !== 0) this.step(-this.#steppedBy);
  }
}

/** The names in a directory, sorted. */
export function names(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((entry) => entry.name).sort();
}

/** The one-letter state of a process (proc(5)), "" when it is gone. */
/** A number from /proc/PID/status ("VmRSS", "RssAnon": KiB). */
export function statusValue(pid: number, key: string): number {
  const text = Deno.readTextFileSync(`/proc/${pid}/status`);
  const match = new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(text);
  if (match?.[1] === undefined) throw new Error(`no ${key} in /proc/${pid}/status`);
  return Number(match[1]);
}

export function processState(pid: number): string {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  } catch {
    return ""; // Gone: no state.
  }
}

/** Open descriptors of a process. */
export function countFds(pid: number): number {
  return [...Deno.readDirSync(`/proc/${pid}/fd`)].length;
}

/** Writes a file synchronously, for building fixtures in bulk. */
export function writeFixture(path: string, data: Uint8Array, mode?: number): void {
  Deno.writeFileSync(path, data, mode === undefined ? {} : { mode });
}

/** Inodes of the listening TCP sockets of the network namespace. */
function listeningInodes(): Set<string> {
  const inodes = new Set<string>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = Deno.readTextFileSync(file);
    } catch {
      continue; // no IPv6: nothing listens there
    }
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields[3] === "0A" && fields[9] !== undefined) inodes.add(fields[9]); // TCP_LISTEN
    }
  }
  return inodes;
}

/** Listening sockets held by a process. */
export function listeningSocketsOf(pid: number): number {
  const listening = listeningInodes();
  let count = 0;
  for (const entry of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      const link = Deno.readLinkSync(`/proc/${pid}/fd/${entry.name}`);
      const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
      if (inode !== undefined && listening.has(inode)) count++;
    } catch {
      // Closed while we looked: not a socket any more.
    }
  }
  return count;
}

/**
 * denit (a subreaper) with its endpoint on a free port of `host` (default 127.0.0.1; "" for
 * every address) and `args`, over a child that sleeps.
 */
export async function endpointOnLoopback(
  options: { host?: string; args?: readonly string[] } = {},
): Promise<{ port: number; proc: Running }> {
  const port = freePort();
  const proc = new Running([
    ...DENIT,
    "-s",
    "--health-addr",
    `${options.host ?? "127.0.0.1"}:${port}`,
    ...(options.args ?? []),
    "--",
    "sh",
    "-c",
    "echo ready; exec sleep 60",
  ]);
  try {
    await proc.waitFor(/^ready$/);
  } catch (err: unknown) {
    proc.kill("SIGKILL"); // never started: nothing of it may outlive the test
    await proc.status();
    throw err;
  }
  return { port, proc };
}

/** A FIFO in a new temporary directory: a child blocks on reading it until `open()` is called. */
export async function fifoGate(
  prefix: string,
): Promise<{ dir: string; path: string; open: () => Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix });
  const path = `${dir}/gate`;
  const made = await run(["mkfifo", path]);
  if (made.code !== 0) throw new Error(`mkfifo: ${made.stderr}`);
  return { dir, path, open: async () => (await Deno.open(path, { write: true })).close() };
}
