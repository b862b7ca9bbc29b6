/** /healthz (/livez), /readyz, /status, /metrics over the supervisor's snapshot, on its thread. */

import type { ListenAddress } from "../common/address.ts";
import type { HealthHandle, HealthOptions } from "../common/snapshot.ts";
import type { Snapshot, SnapshotSource, StatusSettings } from "../common/snapshot.ts";
import { VERSION } from "../common/version.ts";
import { type ProcessStats, ProcessStatsCache } from "./proc_stats.ts";
import type { Readiness, ReadyView } from "./readiness.ts";
import { DEFAULT_LIMITS, type HttpRequest, type HttpResponse, HttpServer } from "./server.ts";

/** What the routes read: the supervisor's snapshot, its start time, and this process. */
export interface HealthSource extends SnapshotSource {
  readonly supervisorStartedAtMs: number;
  processStats(): ProcessStats;
  readonly settings: StatusSettings;
  /** `--ready-when`'s latest result; null without it. */
  readiness(): ReadyView | null;
}

const METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** A constant answer, frozen: shared by every request. */
function answer(status: number, body: string, headers?: Record<string, string>): HttpResponse {
  return Object.freeze({ status, body: `${body}\n`, ...(headers ? { headers } : {}) });
}

const OK = answer(200, "ok");
const NOT_FOUND = answer(404, "not found");
const NOT_ALLOWED = answer(405, "method not allowed", { allow: "GET, HEAD" });
const READINESS: Readonly<Record<Snapshot["state"], HttpResponse>> = {
  starting: answer(503, "child not started yet"),
  running: answer(200, "ready"),
  stopping: answer(503, "stopping: a stop signal was forwarded"),
  exited: answer(503, "child exited"),
};
const DRAINING = answer(503, "stopping: the stop signal is held for --shutdown-delay (draining)");
const TIMED_OUT = answer(503, "stopping: the child's deadline (--timeout) passed");
const WAITING = answer(503, "child exited; waiting for its descendants (--wait-descendants)");

/** /readyz: the supervisor's state, and with --ready-when, the application's readiness. */
export function readiness(source: HealthSource): HttpResponse {
  const s = source.snapshot();
  if (s.state === "stopping") {
    if (s.drainingUntilMs !== null) return DRAINING;
    return s.stopCause === "timeout" ? TIMED_OUT : READINESS.stopping;
  }
  if (s.state === "exited" && s.cleanup === "waiting") return WAITING;
  if (s.state !== "running") return READINESS[s.state];
  const view = source.readiness();
  if (view === null || view.passing) return READINESS.running;
  return answer(503, `not ready: ${view.check}: ${view.lastResult ?? "not checked yet"}`);
}

const KNOWN_PATHS = new Set(["/healthz", "/livez", "/readyz", "/status", "/metrics"]);

/** The /status document; never argv, environment or paths of the child. */
export function statusDocument(source: HealthSource, nowMs: number): Record<string, unknown> {
  const s = source.snapshot();
  const seconds = (ms: number | null) => ms === null ? null : Math.round(ms) / 1000;
  return {
    version: VERSION,
    state: s.state,
    supervisor: {
      pid: Deno.pid,
      startedAt: new Date(source.supervisorStartedAtMs).toISOString(),
      uptimeSeconds: seconds(nowMs - source.supervisorStartedAtMs),
    },
    child: {
      pid: s.pid,
      startedAt: iso(s.startedAtMs),
      uptimeSeconds: s.startedAtMs === null
        ? null
        : seconds((s.exitedAtMs ?? nowMs) - s.startedAtMs),
      exitCode: s.exitCode,
      exitSignal: s.exitSignal,
      exitCause: s.exitCause,
      exitReason: s.exitReason,
      deadlineAt: iso(s.deadlineAtMs),
    },
    zombiesReaped: s.zombiesReaped,
    unreapedZombies: {
      count: s.unreapedZombies,
      parents: s.zombieParents,
      checkedAt: iso(s.zombiesCheckedAtMs),
    },
    signalsForwarded: s.signalsForwarded,
    stopping: s.stopCause === null ? null : {
      cause: s.stopCause,
      drainingUntil: iso(s.drainingUntilMs),
    },
    cleanup: s.cleanup,
    memory: s.memory,
    jobs: s.jobs,
    readiness: readinessDocument(source),
    settings: source.settings,
  };
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function readinessDocument(source: HealthSource): Record<string, unknown> | null {
  const view = source.readiness();
  if (view === null) return null;
  return {
    check: view.check,
    ready: readiness(source).status === 200,
    passing: view.passing,
    lastResult: view.lastResult,
    checkedAt: iso(view.checkedAtMs),
    status: view.status,
    ignored: view.ignored,
  };
}

/** One metric's samples: a value, or values by their labels; null: not shown now. */
type Samples = number | ReadonlyArray<readonly [string, number]> | null;

/** The Prometheus text exposition (format 0.0.4): each metric's help, type, then its samples. */
export function metricsText(source: HealthSource): string {
  const s = source.snapshot();
  const p = source.processStats();
  const j = s.jobs;
  const lines: string[] = [];
  const metric = (type: string) => (name: string, help: string, samples: Samples) => {
    if (samples === null) return;
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    if (typeof samples === "number") lines.push(`${name} ${samples}`);
    else lines.push(...samples.map(([labels, value]) => `${name}{${labels}} ${value}`));
  };
  const [gauge, counter] = [metric("gauge"), metric("counter")];
  const build = `version="${VERSION}",deno="${Deno.version.deno}"`;
  gauge("denit_build_info", "denit and Deno versions.", [[build, 1]]);
  const up = s.state === "running" || s.state === "stopping" ? 1 : 0;
  gauge("denit_child_up", "1 while the child runs.", up);
  const states = ["starting", "running", "stopping", "exited"] as const;
  const current = states.map((state) => [`state="${state}"`, s.state === state ? 1 : 0] as const);
  gauge("denit_state", "The supervisor's state (1 for the current one).", current);
  const started = s.startedAtMs === null ? null : s.startedAtMs / 1000;
  gauge("denit_child_start_time_seconds", "When the child started.", started);
  gauge("denit_child_exit_code", "The exit code denit will exit with.", s.exitCode);
  const cause = s.exitCause === null
    ? null
    : [[`cause="${s.exitCause}",signal="${s.exitSignal ?? ""}"`, 1] as const];
  gauge("denit_child_exit_info", "Why the child ended (always 1).", cause);
  counter("denit_zombies_reaped_total", "Processes reaped, child included.", s.zombiesReaped);
  const unreaped = "Zombies denit cannot reap: their parent is alive and does not wait for them.";
  gauge("denit_unreaped_zombies", unreaped, s.unreapedZombies);
  counter("denit_jobs_started_total", "Jobs started (--jobs-socket).", j?.started ?? null);
  const outcomes = j === null ? null : (["succeeded", "failed", "cancelled"] as const)
    .map((outcome) => [`outcome="${outcome}"`, j[outcome]] as const);
  counter("denit_jobs_finished_total", "Jobs finished, by outcome.", outcomes);
  gauge("denit_jobs_running", "Jobs running now.", j?.running ?? null);
  const signals = Object.entries(s.signalsForwarded).map(([k, n]) => [`signal="${k}"`, n] as const);
  counter("denit_signals_forwarded_total", "Signals sent to the child.", signals);
  gauge("process_resident_memory_bytes", "Resident memory size in bytes.", p.residentBytes);
  gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", p.virtualBytes);
  gauge("process_start_time_seconds", "Start time since the epoch.", p.startTimeSeconds);
  counter("process_cpu_seconds_total", "User and system CPU time.", p.cpuSecondsTotal);
  gauge("denit_ready", "1 when /readyz answers 200.", readiness(source).status === 200 ? 1 : 0);
  gauge("process_open_fds", "Open file descriptors.", p.openFds);
  gauge("process_max_fds", "Limit of open file descriptors.", p.maxFds);
  return `${lines.join("\n")}\n`;
}

export function route(source: HealthSource, request: HttpRequest): HttpResponse {
  if (!KNOWN_PATHS.has(request.path)) return NOT_FOUND;
  if (request.method !== "GET" && request.method !== "HEAD") return NOT_ALLOWED;
  switch (request.path) {
    case "/readyz":
      return readiness(source);
    case "/status":
      return {
        status: 200,
        contentType: "application/json",
        body: `${JSON.stringify(statusDocument(source, Date.now()))}\n`,
      };
    case "/metrics":
      return { status: 200, contentType: METRICS_TYPE, body: metricsText(source) };
    default:
      // Liveness: answering at all says the supervisor's thread turns.
      return OK;
  }
}

/** Descriptors the endpoint's clients leave to denit: its runtime, /proc, the job socket. */
const KEPT_DESCRIPTORS = 40;

/**
 * Binds ("::" falls back to "0.0.0.0" without IPv6); under a low open-file limit it holds fewer
 * connections, leaving denit the descriptors it needs to read /proc and stop leftovers.
 */
function listen(
  address: ListenAddress,
  handler: ConstructorParameters<typeof HttpServer>[1],
  fileLimit: number | null,
) {
  const room = (fileLimit ?? Infinity) - KEPT_DESCRIPTORS;
  const maxConnections = Math.max(1, Math.min(DEFAULT_LIMITS.maxConnections, room));
  const limits = { ...DEFAULT_LIMITS, maxConnections };
  try {
    return new HttpServer(address, handler, limits);
  } catch (err: unknown) {
    if (address.hostname !== "::" || err instanceof Deno.errors.AddrInUse) throw err;
    return new HttpServer({ hostname: "0.0.0.0", port: address.port }, handler, limits);
  }
}

/** Starts the endpoint; resolves once it listens (and --ready-when's check is set up). */
export async function startHealth(
  address: ListenAddress,
  supervisor: SnapshotSource,
  options: HealthOptions,
): Promise<HealthHandle> {
  const stats = new ProcessStatsCache();
  let ready: Readiness | null = null;
  const source: HealthSource = {
    snapshot: () => supervisor.snapshot(),
    supervisorStartedAtMs: options.supervisorStartedAtMs,
    processStats: () => stats.get(),
    settings: options.settings,
    readiness: () => ready?.view() ?? null,
  };
  const server = listen(address, (request) => route(source, request), options.fileLimit);
  if (options.readyWhen !== null) {
    try {
      // Loaded only for --ready-when; notify binds its socket here, before the child starts.
      const { Readiness } = await import("./readiness.ts");
      ready = await Readiness.start(options.readyWhen, () => supervisor.snapshot().pid);
    } catch (err: unknown) {
      server.close();
      throw err;
    }
  }
  const { hostname, port } = server.address;
  const notifySocket = ready?.notifySocket ?? null;
  return { address: { hostname, port }, notifySocket, close: () => server.close() };
}
