/** /healthz (/livez), /readyz, /status, /metrics over the supervisor's snapshot, on its thread. */

import type { ListenAddress } from "../common/address.ts";
import type {
  HealthHandle,
  HealthOptions,
  Snapshot,
  SnapshotSource,
  StatusSettings,
} from "../common/snapshot.ts";
import { VERSION } from "../common/version.ts";
import { type ProcessStats, ProcessStatsCache } from "./proc_stats.ts";
import type { Readiness, ReadyView } from "./readiness.ts";
import { DEFAULT_LIMITS, type HttpRequest, type HttpResponse, HttpServer } from "./server.ts";

/** What the routes read: the supervisor's snapshot, its start time, and this process. */
export interface HealthSource extends SnapshotSource {
  readonly supervisorStartedAtMs: number;
  /** This process's figures for the `process_*` metrics. */
  processStats(): ProcessStats;
  /** The settings /status shows. */
  readonly settings: StatusSettings;
  /** `--ready-when`'s latest result; null without it. */
  readiness(): ReadyView | null;
}

const METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8";

// Constant answers are frozen objects, shared by every request.
const OK: HttpResponse = Object.freeze({ status: 200, body: "ok\n" });
const NOT_FOUND: HttpResponse = Object.freeze({ status: 404, body: "not found\n" });
const NOT_ALLOWED: HttpResponse = Object.freeze({
  status: 405,
  headers: Object.freeze({ allow: "GET, HEAD" }),
  body: "method not allowed\n",
});
const READINESS: Readonly<Record<Snapshot["state"], HttpResponse>> = {
  starting: Object.freeze({ status: 503, body: "child not started yet\n" }),
  running: Object.freeze({ status: 200, body: "ready\n" }),
  stopping: Object.freeze({ status: 503, body: "stopping: a stop signal was forwarded\n" }),
  exited: Object.freeze({ status: 503, body: "child exited\n" }),
};
const DRAINING: HttpResponse = Object.freeze({
  status: 503,
  body: "stopping: the stop signal is held for --shutdown-delay (draining)\n",
});
const TIMED_OUT: HttpResponse = Object.freeze({
  status: 503,
  body: "stopping: the child's deadline (--timeout) passed\n",
});
const WAITING: HttpResponse = Object.freeze({
  status: 503,
  body: "child exited; waiting for its descendants (--wait-descendants)\n",
});

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
  return {
    status: 503,
    body: `not ready: ${view.check}: ${view.lastResult ?? "not checked yet"}\n`,
  };
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
      startedAt: s.startedAtMs === null ? null : new Date(s.startedAtMs).toISOString(),
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

/** The Prometheus text exposition (format 0.0.4): a table, one row per metric, then its lines. */
export function metricsText(source: HealthSource): string {
  const s = source.snapshot();
  const p = source.processStats();
  const j = s.jobs;
  const live = s.state === "running" || s.state === "stopping";
  const states = ["starting", "running", "stopping", "exited"] as const;
  const metrics: ReadonlyArray<readonly [string, string, string, Samples]> = [
    ["denit_build_info", "gauge", "denit and Deno versions.", [[
      `version="${VERSION}",deno="${Deno.version.deno}"`,
      1,
    ]]],
    ["denit_child_up", "gauge", "1 while the child runs.", live ? 1 : 0],
    [
      "denit_state",
      "gauge",
      "The supervisor's state (1 for the current one).",
      states.map((state) => [`state="${state}"`, s.state === state ? 1 : 0]),
    ],
    [
      "denit_child_start_time_seconds",
      "gauge",
      "When the child started.",
      s.startedAtMs === null ? null : s.startedAtMs / 1000,
    ],
    ["denit_child_exit_code", "gauge", "The exit code denit will exit with.", s.exitCode],
    [
      "denit_child_exit_info",
      "gauge",
      "Why the child ended (always 1).",
      s.exitCause === null ? null : [[`cause="${s.exitCause}",signal="${s.exitSignal ?? ""}"`, 1]],
    ],
    [
      "denit_zombies_reaped_total",
      "counter",
      "Processes reaped, child included.",
      s.zombiesReaped,
    ],
    [
      "denit_unreaped_zombies",
      "gauge",
      "Zombies denit cannot reap: their parent is alive and does not wait for them.",
      s.unreapedZombies,
    ],
    ["denit_jobs_started_total", "counter", "Jobs started (--jobs-socket).", j?.started ?? null],
    [
      "denit_jobs_finished_total",
      "counter",
      "Jobs finished, by outcome.",
      j === null ? null : [
        [`outcome="succeeded"`, j.succeeded],
        [`outcome="failed"`, j.failed],
        [`outcome="cancelled"`, j.cancelled],
      ],
    ],
    ["denit_jobs_running", "gauge", "Jobs running now.", j?.running ?? null],
    [
      "denit_signals_forwarded_total",
      "counter",
      "Signals sent to the child.",
      Object.entries(s.signalsForwarded).map(([signal, count]) => [`signal="${signal}"`, count]),
    ],
    ["process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", p.residentBytes],
    ["process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", p.virtualBytes],
    ["process_start_time_seconds", "gauge", "Start time since the epoch.", p.startTimeSeconds],
    ["process_cpu_seconds_total", "counter", "User and system CPU time.", p.cpuSecondsTotal],
    [
      "denit_ready",
      "gauge",
      "1 when /readyz answers 200.",
      readiness(source).status === 200 ? 1 : 0,
    ],
    ["process_open_fds", "gauge", "Open file descriptors.", p.openFds],
    ["process_max_fds", "gauge", "Limit of open file descriptors.", p.maxFds],
  ];
  const lines: string[] = [];
  for (const [name, type, help, samples] of metrics) {
    if (samples === null) continue;
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    if (typeof samples === "number") lines.push(`${name} ${samples}`);
    else lines.push(...samples.map(([labels, value]) => `${name}{${labels}} ${value}`));
  }
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
  return {
    notifySocket: ready?.notifySocket ?? null,
    close: () => server.close(),
  };
}
