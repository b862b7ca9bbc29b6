/**
 * The job service in `make bench`: how long Run takes until the job runs, FollowIO's
 * throughput against `cat` of the same spool file, and denit's memory without the service,
 * with it idle and with 100 running jobs. A real gRPC client (@grpc/grpc-js), loopback only,
 * bounded, and every process started is stopped by pid.
 */

// deno-lint-ignore no-import-prefix -- bench/run.ts runs with --no-config (no import map)
import * as grpc from "npm:@grpc/grpc-js@1.14.0";
// deno-lint-ignore no-import-prefix -- as above
import { loadSync } from "npm:@grpc/proto-loader@0.8.0";

/** What the job service section reports. */
export interface JobFigures {
  runs: number;
  runP50Us: number;
  runP99Us: number;
  /** The bench process's own Deno.Command spawn of /bin/true (a floor for "started"). */
  spawnP50Us: number;
  bytes: number;
  followMiBps: number;
  catMiBps: number;
  rssOffKiB: number;
  rssIdleKiB: number;
  rss100KiB: number;
  /** PID 1's private memory (RssAnon) without the service, and with it idle. */
  anonOffKiB?: number;
  anonIdleKiB?: number;
  /** The service's own process, idle after one job: RssAnon and VmRSS. */
  serviceAnonKiB?: number;
  serviceRssKiB?: number;
  /** denit's peak resident memory over the whole section (VmHWM). */
  hwmKiB: number;
}

interface Job {
  id: string;
  status: string;
  pid: number;
}
type Callback<T> = (err: grpc.ServiceError | null, value?: T) => void;
/** The calls the bench makes. */
export interface JobsClient extends grpc.Client {
  Run(request: object, callback: Callback<Job>): grpc.ClientUnaryCall;
  Follow(request: object): grpc.ClientReadableStream<Job>;
  FollowIO(request: object): grpc.ClientReadableStream<{ stdout: Uint8Array; stderr: Uint8Array }>;
}

function call<T>(start: (callback: Callback<T>) => unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    start((err, value) => err === null && value !== undefined ? resolve(value) : reject(err));
  });
}

function drain<T>(stream: grpc.ClientReadableStream<T>, each: (m: T) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.on("data", each);
    stream.on("error", reject);
    stream.on("end", resolve);
  });
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
}

/** A `kB` field of /proc/PID/status (VmRSS, RssAnon, VmHWM...). */
export function statusKiB(pid: number, field: string): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(new RegExp(`^${field}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? NaN);
}

async function settled(pid: number, field: "VmRSS" | "RssAnon" = "VmRSS"): Promise<number> {
  // Memory after start settles within a second; the lowest of a few reads skips a GC's peak.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const reads: number[] = [];
  for (let i = 0; i < 5; i++) {
    reads.push(statusKiB(pid, field));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return Math.min(...reads);
}

/** The children of a process, from every one of its threads. */
export function childPids(pid: number): number[] {
  const pids: number[] = [];
  for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
    const children = Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/children`);
    pids.push(...children.trim().split(" ").filter((p) => p !== "").map(Number));
  }
  return pids;
}

/** The job service's process: the child of denit whose command line says `job serve`. */
function servicePid(denit: number): number {
  for (const pid of childPids(denit)) {
    const argv = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
    if (argv.includes("job") && argv.includes("serve")) return pid;
  }
  throw new Error("no job service among denit's children");
}

type JobsConstructor = new (a: string, c: grpc.ChannelCredentials, o: object) => JobsClient;
/** The client class of each proto file, loaded once. */
const constructors = new Map<string, JobsConstructor>();

/** A gRPC client of the job service on `socket`, with grpc-js channel `options`. */
export function jobsClient(protoPath: string, socket: string, options: object = {}): JobsClient {
  let Jobs = constructors.get(protoPath);
  if (Jobs === undefined) {
    Jobs = (grpc.loadPackageDefinition(
      loadSync(protoPath, { longs: Number, enums: String, defaults: true }),
    ) as unknown as { denit: { jobs: { v1: { Jobs: JobsConstructor } } } }).denit.jobs.v1.Jobs;
    constructors.set(protoPath, Jobs);
  }
  return new Jobs(`unix:${socket}`, grpc.credentials.createInsecure(), options);
}

/** Waits (at most 20 s) until the service's socket exists. */
export async function waitForSocket(path: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      if ((await Deno.lstat(path)).isSocket) return;
    } catch {
      // Not bound yet.
    }
    if (Date.now() > deadline) throw new Error(`${path} never appeared`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function stop(child: Deno.ChildProcess): Promise<Deno.CommandStatus> {
  try {
    child.kill("SIGTERM");
  } catch {
    // Already gone.
  }
  return child.status;
}

/** The job service's figures; `denit` is the supervisor's argv up to and including "--". */
export async function jobsBench(
  denit: readonly string[],
  protoPath: string,
  runs: number,
  mebibytes: number,
): Promise<JobFigures> {
  const dir = await Deno.makeTempDir({ prefix: "denit-bench-jobs-" });
  const socket = `${dir}/jobs.sock`;
  const [program = "", ...head] = denit;
  const start = (extra: string[]) =>
    new Deno.Command(program, {
      args: [...head.slice(0, -1), ...extra, "--", "sleep", "600"],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
  const off = start([]);
  const on = start(["--jobs-socket", socket, "--jobs-spool", `${dir}/spool`]);
  const client = jobsClient(protoPath, socket);
  const pids: number[] = [];
  try {
    await waitForSocket(socket);
    const rssOffKiB = await settled(off.pid);
    const anonOffKiB = await settled(off.pid, "RssAnon");
    // The first call connects and loads what later ones reuse: not timed.
    await call<Job>((cb) => client.Run({ id: "warm", argv: ["true"] }, cb));
    const rssIdleKiB = await settled(on.pid);
    const anonIdleKiB = await settled(on.pid, "RssAnon");
    const service = servicePid(on.pid);
    const serviceAnonKiB = await settled(service, "RssAnon");
    const serviceRssKiB = await settled(service);

    for (let i = 0; i < 100; i++) {
      const job = await call<Job>((cb) =>
        client.Run({ id: `sleep-${i}`, argv: ["sleep", "600"] }, cb)
      );
      pids.push(job.pid);
    }
    const rss100KiB = await settled(on.pid);
    for (const pid of pids.splice(0)) Deno.kill(pid, "SIGKILL");

    const runUs: number[] = [];
    const spawnUs: number[] = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      await call<Job>((cb) => client.Run({ id: `run-${i}`, argv: ["true"] }, cb));
      runUs.push((performance.now() - t0) * 1000);
      const t1 = performance.now();
      const child = new Deno.Command("/bin/true", { stdout: "null", stderr: "null" }).spawn();
      spawnUs.push((performance.now() - t1) * 1000);
      await child.status;
    }

    const bytes = mebibytes * 1024 * 1024;
    await call<Job>((cb) =>
      client.Run({ id: "big", argv: ["head", "-c", `${bytes}`, "/dev/zero"] }, cb)
    );
    await drain(client.Follow({ id: "big" }), () => {});
    let got = 0;
    const t2 = performance.now();
    await drain(client.FollowIO({ id: "big" }), (m) => got += m.stdout.length);
    const followS = (performance.now() - t2) / 1000;
    // The spool holds a directory per denit run (denit-PID-START/N.out).
    let spool: string | undefined;
    for await (const run of Deno.readDir(`${dir}/spool`)) {
      if (!run.isDirectory) continue;
      for await (const entry of Deno.readDir(`${dir}/spool/${run.name}`)) {
        const path = `${dir}/spool/${run.name}/${entry.name}`;
        if (entry.name.endsWith(".out") && (await Deno.stat(path)).size === bytes) spool = path;
      }
    }
    if (spool === undefined || got !== bytes) throw new Error(`FollowIO gave ${got} bytes`);
    const t3 = performance.now();
    const cat = new Deno.Command("cat", { args: [spool], stdout: "piped" })
      .spawn();
    let catGot = 0;
    for await (const chunk of cat.stdout) catGot += chunk.length;
    await cat.status;
    const catS = (performance.now() - t3) / 1000;
    if (catGot !== bytes) throw new Error(`cat gave ${catGot} bytes`);

    const hwmKiB = Number(
      /^VmHWM:\s+(\d+)/m.exec(await Deno.readTextFile(`/proc/${on.pid}/status`))?.[1] ?? NaN,
    );
    return {
      hwmKiB,
      runs,
      runP50Us: percentile(runUs, 0.5),
      runP99Us: percentile(runUs, 0.99),
      spawnP50Us: percentile(spawnUs, 0.5),
      bytes,
      followMiBps: bytes / (1024 * 1024) / followS,
      catMiBps: bytes / (1024 * 1024) / catS,
      rssOffKiB,
      rssIdleKiB,
      rss100KiB,
      anonOffKiB,
      anonIdleKiB,
      serviceAnonKiB,
      serviceRssKiB,
    };
  } finally {
    client.close();
    for (const pid of pids) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch {
        // Gone with denit already.
      }
    }
    await Promise.all([stop(off), stop(on)]);
    await Deno.remove(dir, { recursive: true });
  }
}
