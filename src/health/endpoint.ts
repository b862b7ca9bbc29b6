/**
 * The health endpoint: /healthz (/livez), /readyz, /status and /metrics over the supervisor's
 * snapshot. It reads and never writes; it is imported only when `--health` is given.
 */

import type { ListenAddress } from "../common/address.ts";
import type { Snapshot, SnapshotSource } from "../common/snapshot.ts";
import { VERSION } from "../common/version.ts";
import { readProcessStats } from "./proc_stats.ts";
import { type HttpRequest, type HttpResponse, HttpServer } from "./server.ts";

/** What the routes read: the supervisor's snapshot and denit's own start time. */
export interface HealthSource extends SnapshotSource {
  readonly supervisorStartedAtMs: number;
}

const METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8";

// Constant answers are frozen objects: the server encodes each of them once (http.ts).
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
    },
    zombiesReaped: s.zombiesReaped,
    signalsForwarded: s.signalsForwarded,
  };
}

function metric(lines: string[], name: string, type: string, help: string, samples: string[]) {
  lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, ...samples);
}

/** The Prometheus text exposition (format 0.0.4). */
export function metricsText(source: HealthSource): string {
  const s = source.snapshot();
  const p = readProcessStats();
  const lines: string[] = [];
  metric(lines, "denit_build_info", "gauge", "denit and Deno versions.", [
    `denit_build_info{version="${VERSION}",deno="${Deno.version.deno}"} 1`,
  ]);
  metric(lines, "denit_child_up", "gauge", "1 while the child runs.", [
    `denit_child_up ${s.state === "running" || s.state === "stopping" ? 1 : 0}`,
  ]);
  metric(lines, "denit_state", "gauge", "The supervisor's state (1 for the current one).", [
    ...(["starting", "running", "stopping", "exited"] as const).map((state) =>
      `denit_state{state="${state}"} ${s.state === state ? 1 : 0}`
    ),
  ]);
  if (s.startedAtMs !== null) {
    metric(lines, "denit_child_start_time_seconds", "gauge", "When the child started.", [
      `denit_child_start_time_seconds ${s.startedAtMs / 1000}`,
    ]);
  }
  if (s.exitCode !== null) {
    metric(lines, "denit_child_exit_code", "gauge", "The exit code denit will exit with.", [
      `denit_child_exit_code ${s.exitCode}`,
    ]);
  }
  metric(lines, "denit_zombies_reaped_total", "counter", "Processes reaped, child included.", [
    `denit_zombies_reaped_total ${s.zombiesReaped}`,
  ]);
  metric(lines, "denit_signals_forwarded_total", "counter", "Signals sent to the child.", [
    ...Object.entries(s.signalsForwarded).map(([signal, count]) =>
      `denit_signals_forwarded_total{signal="${signal}"} ${count}`
    ),
  ]);
  metric(lines, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", [
    `process_resident_memory_bytes ${p.residentBytes}`,
  ]);
  metric(lines, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", [
    `process_virtual_memory_bytes ${p.virtualBytes}`,
  ]);
  metric(lines, "process_start_time_seconds", "gauge", "Start time since the epoch.", [
    `process_start_time_seconds ${p.startTimeSeconds}`,
  ]);
  metric(lines, "process_cpu_seconds_total", "counter", "User and system CPU time.", [
    `process_cpu_seconds_total ${p.cpuSecondsTotal}`,
  ]);
  metric(lines, "process_open_fds", "gauge", "Open file descriptors.", [
    `process_open_fds ${p.openFds}`,
  ]);
  metric(lines, "process_max_fds", "gauge", "Limit of open file descriptors.", [
    `process_max_fds ${p.maxFds}`,
  ]);
  return `${lines.join("\n")}\n`;
}

/** Routes one request. */
export function route(source: HealthSource, request: HttpRequest): HttpResponse {
  if (!KNOWN_PATHS.has(request.path)) return NOT_FOUND;
  if (request.method !== "GET" && request.method !== "HEAD") return NOT_ALLOWED;
  switch (request.path) {
    case "/readyz":
      return READINESS[source.snapshot().state];
    case "/status":
      return {
        status: 200,
        contentType: "application/json",
        body: `${JSON.stringify(statusDocument(source, Date.now()))}\n`,
      };
    case "/metrics":
      return { status: 200, contentType: METRICS_TYPE, body: metricsText(source) };
    default:
      // Answering at all proves the event loop turns: that is what liveness means here.
      return OK;
  }
}

/** Binds the endpoint (throws on a taken or invalid address) and serves it. */
export function startHealth(address: ListenAddress, source: HealthSource): HttpServer {
  return new HttpServer(address, (request) => route(source, request));
}
