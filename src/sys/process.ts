/** Process calls: spawn, wait, signal, prctl, limits; errno is read right after each call. */

import { FILE_ACTIONS_BYTES, O, RLIMIT, SIGINFO, SPAWNATTR_BYTES } from "./layout.ts";
import { addressOf, type CallResult, checked, cString, Errno, errno, libc } from "./symbols.ts";
import { signalSet } from "./signals.ts";

export { Errno, errnoMessage } from "./symbols.ts";

const WNOHANG = 1; // sys/wait.h
const WEXITED = 4; // sys/wait.h
const WNOWAIT = 0x01000000; // sys/wait.h
const P_PID = 1; // sys/wait.h idtype_t
const POSIX_SPAWN_SETPGROUP = 0x02; // spawn.h
const POSIX_SPAWN_SETSIGDEF = 0x04; // spawn.h
const POSIX_SPAWN_SETSIGMASK = 0x08; // spawn.h
const PR_SET_PDEATHSIG = 1; // linux/prctl.h
const PR_SET_CHILD_SUBREAPER = 36; // linux/prctl.h
const PR_GET_CHILD_SUBREAPER = 37; // linux/prctl.h
const RLIMIT_NOFILE = 7; // bits/resource.h
const F_OK = 0; // unistd.h
const X_OK = 1; // unistd.h

/** How a process ended, decoded from a wait status. */
export type ExitStatus =
  | { kind: "exited"; code: number }
  | { kind: "signaled"; signo: number; coreDumped: boolean };

/** A raw wait status, decoded as the sys/wait.h macros do. */
export function decodeWaitStatus(raw: number): ExitStatus {
  const termsig = raw & 0x7f;
  if (termsig === 0) return { kind: "exited", code: (raw >> 8) & 0xff }; // WIFEXITED, WEXITSTATUS
  // WIFSIGNALED is termsig != 0 && termsig != 0x7f; 0x7f (stopped) needs WUNTRACED, never used.
  return { kind: "signaled", signo: termsig, coreDumped: (raw & 0x80) !== 0 }; // WTERMSIG, WCOREDUMP
}

const drainStatus = new Int32Array(1);

/** waitpid(-1, WNOHANG) without allocating: a pid (see lastReapedStatus), 0, or -errno. */
export function reapNext(): number {
  const pid = libc.waitpid(-1, drainStatus, WNOHANG);
  return pid >= 0 ? pid : -errno();
}

/** The signal that ended the child `reapNext()` last returned (WTERMSIG), 0 if it exited. */
export function lastReapedSignal(): number {
  const raw = drainStatus[0] ?? 0;
  return (raw & 0x7f) === 0x7f ? 0 : raw & 0x7f;
}

/** The status of the child `reapNext()` last returned. */
export function lastReapedStatus(): ExitStatus {
  return decodeWaitStatus(drainStatus[0] ?? 0);
}

const peekInfo = new Uint8Array(SIGINFO.bytes);

/** True when this child has terminated and waits to be reaped (waitid WNOWAIT: reaps nothing). */
export function hasTerminated(pid: number): boolean {
  peekInfo.fill(0);
  if (libc.waitid(P_PID, pid, peekInfo, WEXITED | WNOWAIT | WNOHANG) !== 0) return false;
  // waitid(2) with WNOHANG: si_pid stays 0 when the child has not changed state.
  return new DataView(peekInfo.buffer).getInt32(SIGINFO.pid, true) !== 0;
}

/** kill(2): pid > 0 one process, pid < -1 a process group, -1 every process we may signal. */
export function sendSignal(pid: number, signo: number): CallResult {
  return checked(libc.kill(pid, signo));
}

/** prctl(PR_SET_CHILD_SUBREAPER, 1): orphaned descendants are reparented to this process. */
export function becomeSubreaper(): CallResult {
  return checked(libc.prctl(PR_SET_CHILD_SUBREAPER, 1n, 0n, 0n, 0n));
}

// Larger than V8 keeps on its heap: its address does not move while prctl writes to it.
const subreaperFlag = new Int32Array(32);

/** prctl(PR_GET_CHILD_SUBREAPER): whether this process already adopts orphans (its parent set it). */
export function isSubreaper(): boolean {
  subreaperFlag[0] = 0;
  const address = addressOf(subreaperFlag);
  return libc.prctl(PR_GET_CHILD_SUBREAPER, address, 0n, 0n, 0n) === 0 && subreaperFlag[0] !== 0;
}

/** prctl(PR_SET_PDEATHSIG, signo): get signo when the parent that started us dies. */
export function setParentDeathSignal(signo: number): CallResult {
  return checked(libc.prctl(PR_SET_PDEATHSIG, BigInt(signo), 0n, 0n, 0n));
}

/** True when fd 0 is the controlling terminal (tcgetpgrp(3) succeeds). */
export function isControllingTerminal(): boolean {
  if (!Deno.stdin.isTerminal()) return false;
  return libc.tcgetpgrp(0) >= 0;
}

/** access(path, F_OK): whether the path exists, without the cost of a thrown Deno error. */
export function pathExists(path: string): boolean {
  return libc.access(cString(path), F_OK) === 0;
}

/** access(path, X_OK): whether this process may execute the file. */
export function canExecute(path: Uint8Array): CallResult {
  return checked(libc.access(cString(path), X_OK));
}

/** Soft and hard limit of open files; `null` for RLIM_INFINITY. */
export interface FileLimit {
  readonly soft: number | null;
  readonly hard: number | null;
}

function limitValue(value: bigint): number | null {
  return value === 0xffffffffffffffffn ? null : Number(value);
}

export function fileLimit(): FileLimit {
  const old = new BigUint64Array(RLIMIT.bytes / 8);
  libc.prlimit(0, RLIMIT_NOFILE, null, old);
  return { soft: limitValue(old[0] ?? 0n), hard: limitValue(old[1] ?? 0n) };
}

export function setFileLimit(limit: FileLimit): CallResult {
  const value = (n: number | null) => n === null ? 0xffffffffffffffffn : BigInt(n);
  const buffer = new BigUint64Array([value(limit.soft), value(limit.hard)]);
  return checked(libc.prlimit(0, RLIMIT_NOFILE, buffer, null));
}

/** What to start: an executable path (already resolved) and argv, as raw bytes. */
export interface SpawnRequest {
  readonly path: Uint8Array;
  readonly argv: readonly Uint8Array[];
  /** Make the child's new process group the foreground group of this terminal fd. */
  readonly foregroundFd?: number;
  /** The child's soft limit of open files (null: unlimited), when it must differ from ours. */
  readonly fileSoftLimit?: number | null;
  /** [descriptor, target] pairs: the child gets each descriptor as `target`. */
  readonly descriptors?: ReadonlyArray<readonly [number, number]>;
  /** The child's "NAME=VALUE" entries; this process's environment when absent. */
  readonly environment?: readonly Uint8Array[];
}

export type SpawnResult =
  | { kind: "spawned"; pid: number }
  | { kind: "failed"; errno: number; stage: "exec" | "foreground" };

function currentEnviron(): Deno.PointerValue {
  // Read at each spawn: setenv(3) may have moved the array since the library was opened.
  const address = libc.environ;
  return address === null ? null : new Deno.UnsafePointerView(address).getPointer();
}

const EQUALS = 0x3d; // "="
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** This process's environment byte for byte with `variables` set; undefined when none are. */
export function environmentWith(
  variables: Readonly<Record<string, string>>,
): Uint8Array[] | undefined {
  const names = Object.keys(variables);
  if (names.length === 0) return undefined;
  const entries: Uint8Array[] = [];
  const environ = currentEnviron();
  const nameOf = (entry: Uint8Array) => decoder.decode(entry.subarray(0, entry.indexOf(EQUALS)));
  if (environ !== null) {
    const table = new Deno.UnsafePointerView(environ);
    for (let i = 0;; i++) {
      const pointer = table.getPointer(i * 8);
      if (pointer === null) break;
      const view = new Deno.UnsafePointerView(pointer);
      let length = 0;
      while (view.getUint8(length) !== 0) length++;
      const entry = new Uint8Array(view.getArrayBuffer(length).slice(0));
      if (!names.includes(nameOf(entry))) entries.push(entry);
    }
  }
  for (const name of names) entries.push(encoder.encode(`${name}=${variables[name]}`));
  return entries;
}

// Every signal 1..64, directly: sigfillset(3) in glibc leaves out 32 and 33 (its internal
// SIGCANCEL and SIGSETXID), and posix_spawn would then leave those two as the parent has them.
const ALL_SIGNALS = Array.from({ length: 64 }, (_, i) => i + 1);
const F_DUPFD_CLOEXEC = 1030; // fcntl.h

function spawnAttributes(): Uint8Array<ArrayBuffer> {
  const attr = new Uint8Array(SPAWNATTR_BYTES);
  libc.posix_spawnattr_init(attr);
  const flags = POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  libc.posix_spawnattr_setflags(attr, flags);
  libc.posix_spawnattr_setpgroup(attr, 0); // a new process group led by the child
  libc.posix_spawnattr_setsigdefault(attr, signalSet(ALL_SIGNALS)); // every signal at SIG_DFL
  libc.posix_spawnattr_setsigmask(attr, signalSet([])); // an empty mask
  return attr;
}

/**
 * The file actions: the terminal hand-over and each [descriptor, target] dup2 (a descriptor that
 * is a target is first copied above all targets); `copies` gets what to close after the spawn.
 */
function fileActions(request: SpawnRequest, copies: number[]): Uint8Array<ArrayBuffer> | null {
  const pairs = request.descriptors ?? [];
  // Only where this libc can hand the terminal over before the exec (glibc 2.35+).
  const hand = libc.posix_spawn_file_actions_addtcsetpgrp_np;
  const foreground = request.foregroundFd !== undefined && hand !== null;
  if (pairs.length === 0 && !foreground) return null;
  const actions = new Uint8Array(FILE_ACTIONS_BYTES);
  libc.posix_spawn_file_actions_init(actions);
  if (foreground) hand?.(actions, request.foregroundFd ?? 0);
  const targets = pairs.map(([, target]) => target);
  for (const [fd, target] of pairs) {
    let source = fd;
    if (targets.includes(fd)) {
      source = libc.fcntl(fd, F_DUPFD_CLOEXEC, Math.max(...targets) + 1);
      copies.push(source);
    }
    libc.posix_spawn_file_actions_adddup2(actions, source, target);
  }
  return actions;
}

/** posix_spawn(3): a new group, default dispositions, empty mask, environment byte for byte. */
export function spawn(request: SpawnRequest): SpawnResult {
  const path = cString(request.path);
  const argv = packStrings(request.argv);
  const copies: number[] = [];
  const actions = fileActions(request, copies);
  const attr = spawnAttributes();
  // setrlimit is process-wide: lowered only around the spawn (denit holds few descriptors).
  const limit = request.fileSoftLimit === undefined ? null : fileLimit();
  if (limit !== null && limit.soft !== request.fileSoftLimit) {
    setFileLimit({ soft: request.fileSoftLimit ?? null, hard: limit.hard });
  }
  try {
    const pid = new Int32Array(1);
    const environment = request.environment === undefined ? null : packStrings(request.environment);
    const envp = environment === null
      ? currentEnviron()
      : Deno.UnsafePointer.of(environment.pointers);
    const code = libc.posix_spawn(pid, path, actions, attr, argv.pointers, envp);
    void environment; // its strings outlive posix_spawn
    if (code === 0) return { kind: "spawned", pid: pid[0] ?? 0 };
    // glibc reports a failed file action (here only tcsetpgrp, ENOTTY/EPERM) the same way.
    const tty = code === Errno.ENOTTY || code === Errno.EPERM;
    const stage = request.foregroundFd !== undefined && tty ? "foreground" : "exec";
    return { kind: "failed", errno: code, stage };
  } finally {
    if (limit !== null && limit.soft !== request.fileSoftLimit) setFileLimit(limit);
    libc.posix_spawnattr_destroy(attr);
    if (actions !== null) libc.posix_spawn_file_actions_destroy(actions);
    copies.forEach((fd) => libc.close(fd));
    // The C strings must outlive posix_spawn: referenced here, they stay reachable until now.
    void [path, argv];
  }
}

/** C strings in one block and a `char *[]` over them, off V8's heap (they do not move). */
function packStrings(strings: readonly Uint8Array[]): {
  block: Uint8Array<ArrayBuffer>;
  pointers: BigUint64Array<ArrayBuffer>;
} {
  const size = strings.reduce((total, s) => total + s.length + 1, 0);
  const block = new Uint8Array(Math.max(size, 128));
  const pointers = new BigUint64Array(Math.max(strings.length + 1, 16));
  const base = addressOf(block);
  let at = 0;
  strings.forEach((s, i) => {
    block.set(s, at);
    pointers[i] = base + BigInt(at);
    at += s.length + 1;
  });
  pointers[strings.length] = 0n;
  return { block, pointers };
}

/** Spawns a helper (a job's keeper), reads its stdout to the end and reaps it: text or -errno. */
export function spawnAndRead(request: SpawnRequest): string | number {
  const fds = new Int32Array(2);
  if (libc.pipe2(fds, O.CLOEXEC) !== 0) return -errno();
  const [read = -1, write = -1] = fds;
  const result = spawn({ ...request, descriptors: [[write, 1]] });
  libc.close(write);
  let text = "";
  if (result.kind === "spawned") {
    const buffer = new Uint8Array(256);
    const decoder = new TextDecoder();
    for (;;) {
      const n = Number(libc.read(read, buffer, BigInt(buffer.length)));
      if (n < 0 && errno() === Errno.EINTR) continue;
      if (n <= 0) break;
      text += decoder.decode(buffer.subarray(0, n));
    }
    const status = new Int32Array(1);
    while (libc.waitpid(result.pid, status, 0) < 0 && errno() === Errno.EINTR) {
      // interrupted: wait again
    }
  }
  libc.close(read);
  return result.kind === "spawned" ? text : -result.errno;
}
