/**
 * `make bench`: denit side by side with tini, dumb-init and catatonit, and with the "Deno
 * floor" (what the runtime costs by itself), interleaved in one run, medians over repeats,
 * each figure also as a ratio to tini. Writes bench/RESULTS.md and bench/chart.svg.
 *
 * Usage: run.ts PROBE DENO DENIT OUT_DIR [--quick]: DENIT is the launcher (dist/denit), the form
 * users run; DENO the runtime the floors run on.
 */

const RUN_FLAGS = ["run", "--quiet", "--no-config", "--no-lock", "--allow-all", "--no-prompt"];
import { renderChart } from "./chart.ts";
import { childPids, jobsBench, statusKiB } from "./jobs.ts";
import {
  COPY_ROWS,
  EXIT_ROWS,
  type Feature,
  FEATURE_ROWS,
  type Figures,
  HEALTH_ROWS,
  recordOf,
  renderResults,
  SIGNAL_ROWS,
  START_ROWS,
  type Supervisor,
  SUPERVISORS as NAMES,
} from "./report.ts";

const [PROBE = "", DENO = "", DENIT = "", OUT = ""] = Deno.args;
const QUICK = Deno.args.includes("--quick");
const HERE = new URL(".", import.meta.url).pathname;
const RUN = RUN_FLAGS;

/** Each supervisor's argv up to and including its "--" (not PID 1: subreaper where offered). */
const SUPERVISORS: Record<Supervisor, string[]> = {
  tini: ["tini", "-s", "--"],
  "dumb-init": ["dumb-init", "--"],
  catatonit: ["catatonit", "--"],
  denit: [DENIT, "-s", "--"],
};
/** The same as PID 1 of a PID namespace. */
const AS_PID1: Record<Supervisor, string[]> = {
  tini: ["tini", "--"],
  "dumb-init": ["dumb-init", "--"],
  catatonit: ["catatonit", "--"],
  denit: [DENIT, "--"],
};
const FLOOR_SPAWN = [DENO, ...RUN, `${HERE}floor_spawn.js`];
const FLOOR_EMPTY = [DENO, ...RUN, `${HERE}floor_empty.js`];
const FLOOR_FFI = [DENO, ...RUN, `${HERE}floor_ffi.js`];
/** A bare Deno.addSignalListener forwarder, up to and including its "--". */
const FLOOR_FORWARD = [DENO, ...RUN, `${HERE}floor_forward.js`, "--"];

/** Collected samples by row. */
class Samples<K extends string> {
  readonly #values = new Map<K, number[]>();
  push(key: K, value: number): void {
    const list = this.#values.get(key) ?? [];
    list.push(value);
    this.#values.set(key, list);
  }
  get(key: K): number[] {
    return this.#values.get(key) ?? [];
  }
  median(key: K): number {
    return median(this.get(key));
  }
}

function command(argv: readonly string[]): Deno.Command {
  const [program = "", ...args] = argv;
  return new Deno.Command(program, { args, stdout: "piped", stderr: "inherit" });
}

function log(message: string): void {
  Deno.stderr.writeSync(new TextEncoder().encode(`bench: ${message}\n`));
}

function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    const [a, b] = [out[i], out[j]];
    if (a !== undefined && b !== undefined) [out[i], out[j]] = [b, a];
  }
  return out;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

function probe(args: string[]): Record<string, number> {
  const out = new Deno.Command(PROBE, { args, stdout: "piped", stderr: "inherit" }).outputSync();
  const line = new TextDecoder().decode(out.stdout).trim().split("\n").at(-1) ?? "";
  try {
    return JSON.parse(line);
  } catch {
    throw new Error(`probe ${args.join(" ")} printed "${line}"`);
  }
}

/** Each feature's options, on top of denit's plain `-s --` (a fresh socket for every run). */
function featureArgs(feature: Feature, scratch: string, run: number): string[] {
  switch (feature) {
    case "health":
      return ["--health-addr", "127.0.0.1:0"];
    case "user":
      return ["--user", "65534:65534"];
    case "timers":
      return ["--timeout", "1h", "--grace", "5s", "--shutdown-delay", "1s"];
    case "jobs":
      return ["--jobs-socket", `${scratch}/${run}.sock`, "--jobs-spool", `${scratch}/spool`];
  }
}

function startOverhead(repeats: number): Figures["start"] {
  log(`start overhead: ${repeats} rounds, and denit with each of ${FEATURE_ROWS.join(", ")}`);
  type Row = typeof START_ROWS[number] | "alone" | Feature;
  const runs = new Samples<Row>();
  const scratch = Deno.makeTempDirSync({ prefix: "denit-bench-start-" });
  let run = 0;
  const cases: Array<[Row, () => string[]]> = [
    ["alone", () => ["/bin/true"]],
    ["floorEmpty", () => FLOOR_EMPTY],
    ["floorSpawn", () => [...FLOOR_SPAWN, "/bin/true"]],
    ["floorFfi", () => [...FLOOR_FFI, "/bin/true"]],
    ...NAMES.map((name): [Row, () => string[]] => [
      name,
      () => [...SUPERVISORS[name], "/bin/true"],
    ]),
    ...FEATURE_ROWS.map((feature): [Row, () => string[]] => [
      feature,
      () => [
        ...SUPERVISORS.denit.slice(0, -1),
        ...featureArgs(feature, scratch, ++run),
        "--",
        "/bin/true",
      ],
    ]),
  ];
  try {
    for (let round = 0; round < repeats; round++) {
      for (const [name, argv] of shuffled(cases)) {
        runs.push(name, probe(["time", ...argv()]).us ?? NaN);
      }
    }
  } finally {
    Deno.removeSync(scratch, { recursive: true });
  }
  const alone = runs.median("alone");
  const plain = runs.median("denit");
  return {
    alone,
    overheadUs: recordOf(START_ROWS, (name) => runs.median(name) - alone),
    featureUs: recordOf(FEATURE_ROWS, (name) => runs.median(name) - plain),
  };
}

/** Requests to /healthz before the health row's second memory sample. */
const HEALTH_PROBES = 1000;

/** A loopback port free a moment ago. */
function loopbackPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

async function memory(repeats: number): Promise<Figures["memory"]> {
  log(`memory: ${repeats} rounds`);
  type Row = typeof START_ROWS[number] | "health";
  const cases: Array<[Row, string[], boolean]> = [
    ["floorEmpty", [...FLOOR_EMPTY, "sleep"], false],
    ["floorSpawn", [...FLOOR_SPAWN, "sleep", "30"], true],
    ["floorFfi", [...FLOOR_FFI, "sleep", "30"], true],
    ...NAMES.map((
      name,
    ): [Supervisor, string[], boolean] => [name, [...SUPERVISORS[name], "sleep", "30"], true]),
  ];
  const port = loopbackPort();
  cases.push(["health", [
    ...SUPERVISORS.denit.slice(0, -1),
    "--health-addr",
    `127.0.0.1:${port}`,
    "--",
    "sleep",
    "30",
  ], true]);
  const probed: number[] = [];
  const rss = new Samples<Row>();
  const hwm = new Samples<Row>();
  const anon = new Samples<Row>();
  const pss = new Samples<Row>();
  for (let round = 0; round < repeats; round++) {
    for (const [name, argv, hasChild] of shuffled(cases)) {
      const [program = "", ...args] = argv;
      const child = new Deno.Command(program, { args, stdout: "null", stderr: "null" }).spawn();
      const deadline = Date.now() + 10_000;
      // Sampled once the supervisor's child runs, and after a settle time for lazy start-up work.
      while (hasChild && childPids(child.pid).length === 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 5));
      }
      await new Promise((r) => setTimeout(r, 300));
      rss.push(name, statusKiB(child.pid, "VmRSS"));
      hwm.push(name, statusKiB(child.pid, "VmHWM"));
      anon.push(name, statusKiB(child.pid, "RssAnon"));
      pss.push(name, smapsField(child.pid, "Pss"));
      if (name === "health") {
        for (let i = 0; i < HEALTH_PROBES; i++) {
          await (await fetch(`http://127.0.0.1:${port}/healthz`)).body?.cancel();
        }
        probed.push(statusKiB(child.pid, "RssAnon"));
      }
      child.kill("SIGTERM");
      await child.status;
    }
  }
  return {
    rssKiB: recordOf(START_ROWS, (name) => rss.median(name)),
    hwmKiB: recordOf(START_ROWS, (name) => hwm.median(name)),
    anonKiB: recordOf(START_ROWS, (name) => anon.median(name)),
    pssKiB: recordOf(START_ROWS, (name) => pss.median(name)),
    health: {
      rssKiB: rss.median("health"),
      anonKiB: anon.median("health"),
      probedAnonKiB: probed.sort((a, b) => a - b)[probed.length >> 1] ?? NaN,
      probes: HEALTH_PROBES,
    },
    cgroup: await cgroupCharge(),
  };
}

function smapsField(pid: number, field: string): number {
  const text = Deno.readTextFileSync(`/proc/${pid}/smaps_rollup`);
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN);
}

/** A fresh memory cgroup to run in, or null where none can be made (not root, no controller). */
function makeMemoryCgroup(name: string): { version: 1 | 2; dir: string; usage: string } | null {
  const candidates = [
    { version: 1 as const, dir: `/sys/fs/cgroup/memory/${name}`, usage: "memory.usage_in_bytes" },
    { version: 2 as const, dir: `/sys/fs/cgroup/${name}`, usage: "memory.current" },
  ];
  for (const candidate of candidates) {
    try {
      Deno.mkdirSync(candidate.dir);
      Deno.statSync(`${candidate.dir}/${candidate.usage}`);
      return candidate;
    } catch {
      try {
        Deno.removeSync(candidate.dir);
      } catch {
        // Never made: nothing to undo.
      }
    }
  }
  return null;
}

/**
 * The charge of a denit in its own memory cgroup: a first one (whose cgroup pays for the
 * runtime's file pages as they are read), then a second beside it, as a second container of
 * the same image on a node. Each runs `sleep`; measured once its child runs, after a settle.
 */
async function cgroupCharge(): Promise<Exclude<Figures["memory"]["cgroup"], undefined>> {
  log("memory: the cgroup charge of a first and a second denit");
  const groups = ["first", "second"].map((which) =>
    makeMemoryCgroup(`denit-bench-${which}-${Deno.pid}`)
  );
  const [first, second] = groups;
  const children: Deno.ChildProcess[] = [];
  try {
    if (first === null || first === undefined || second === null || second === undefined) {
      return null;
    }
    const charged: number[] = [];
    for (const group of [first, second]) {
      const child = new Deno.Command("sh", {
        args: [
          "-c",
          `echo $$ > ${group.dir}/cgroup.procs && exec "$@"`,
          "sh",
          ...SUPERVISORS.denit,
          "sleep",
          "30",
        ],
        stdout: "null",
        stderr: "null",
      }).spawn();
      children.push(child);
      const deadline = Date.now() + 10_000;
      while (childPids(child.pid).length === 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 5));
      }
      await new Promise((r) => setTimeout(r, 500));
      charged.push(Number((await Deno.readTextFile(`${group.dir}/${group.usage}`)).trim()) / 1024);
    }
    return { version: first.version, firstKiB: charged[0] ?? NaN, secondKiB: charged[1] ?? NaN };
  } finally {
    for (const child of children) {
      child.kill("SIGTERM");
      await child.status;
    }
    for (const group of groups) {
      if (group === null || group === undefined) continue;
      for (let i = 0; i < 100; i++) {
        try {
          await Deno.remove(group.dir);
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 20)); // its last process is still leaving
        }
      }
    }
  }
}

/** A static /bin/true on the rootfs form's image, for `docker run --rm IMG /bin/true`. */
function dockerImage(): string | null {
  const info = new Deno.Command("docker", { args: ["info"], stdout: "null", stderr: "null" });
  try {
    if (!info.outputSync().success) return null;
  } catch {
    return null; // no docker at all
  }
  const dir = Deno.makeTempDirSync({ prefix: "denit-bench-image-" });
  try {
    Deno.writeTextFileSync(`${dir}/true.c`, "int main(void) { return 0; }\n");
    sh(`gcc -O2 -static -o ${dir}/true ${dir}/true.c`);
    Deno.writeTextFileSync(`${dir}/Dockerfile`, "FROM denit-bench-base\nCOPY true /bin/true\n");
    sh(
      `docker build -q -t denit-bench-base -f ${HERE}../launch/rootfs.Dockerfile ${HERE}../dist/rootfs >/dev/null 2>&1`,
    );
    sh(`docker build -q -t denit-bench ${dir} >/dev/null 2>&1`);
    return "denit-bench";
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

/** Wall time of `docker run --rm` of /bin/true: denit as the entrypoint, and Docker's --init. */
function dockerRun(repeats: number): Exclude<Figures["docker"], undefined> {
  const image = dockerImage();
  if (image === null) {
    log("docker: no daemon here, section skipped");
    return null;
  }
  log(`docker run --rm ${image} /bin/true: ${repeats} rounds, denit and --init`);
  const runs = new Samples<"denit" | "init">();
  const cases: Array<["denit" | "init", string[]]> = [
    ["denit", ["docker", "run", "--rm", "--network", "none", image, "/bin/true"]],
    ["init", [
      "docker",
      "run",
      "--rm",
      "--network",
      "none",
      "--init",
      "--entrypoint",
      "/bin/true",
      image,
    ]],
  ];
  for (let round = 0; round < repeats; round++) {
    for (const [name, argv] of shuffled(cases)) {
      runs.push(name, (probe(["time", ...argv]).us ?? NaN) / 1000);
    }
  }
  return { runs: repeats, denitMs: runs.median("denit"), initMs: runs.median("init") };
}

/** The image's size (when Docker runs), and `denit init` into an empty directory: size, time. */
function sizes(repeats: number): Exclude<Figures["sizes"], undefined> {
  log(`sizes: the image, and denit init into an empty directory (${repeats} rounds)`);
  const inspect = new Deno.Command("docker", {
    args: ["image", "inspect", "--format", "{{.Size}}", "denit-bench-base"],
    stdout: "piped",
    stderr: "null",
  });
  let imageBytes: number | null = null;
  try {
    const out = inspect.outputSync();
    if (out.success) imageBytes = Number(new TextDecoder().decode(out.stdout).trim());
  } catch {
    // No docker at all: the image's row says "-".
  }
  const dir = Deno.makeTempDirSync({ prefix: "denit-bench-init-" });
  const times: number[] = [];
  let copyBytes = 0;
  let copyFiles = 0;
  try {
    for (let round = 0; round < repeats; round++) {
      const dest = `${dir}/${round}`;
      times.push((probe(["time", DENIT, "init", dest]).us ?? NaN) / 1000);
      copyBytes = 0;
      copyFiles = 0;
      for (const entry of Deno.readDirSync(dest)) {
        copyBytes += Deno.statSync(`${dest}/${entry.name}`).size;
        copyFiles++;
      }
    }
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
  return { imageBytes, copyBytes, copyFiles, initMs: median(times), runs: repeats };
}

/** Waits until something accepts connections on a port (at most 10 s). */
function awaitPort(port: number): void {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    // bash, for its /dev/tcp: connecting is the test.
    const out = new Deno.Command("bash", {
      args: ["-c", `exec 3<>/dev/tcp/127.0.0.1/${port}`],
      stderr: "null",
    }).outputSync();
    if (out.success) return;
  }
  throw new Error(`nothing listens on ${port}`);
}

async function hostile(
  count: number,
  seconds: number,
  repeats: number,
): Promise<Figures["hostile"]> {
  log(
    `signals under 64 hostile health connections: ${count} signals, denit and tini, ` +
      `${repeats} rounds`,
  );
  const attack = (port: number) =>
    new Deno.Command("python3", {
      args: [`${HERE}../fixtures/hostile_http.py`, "spaces", String(port), "64", String(seconds)],
      stdout: "null",
      stderr: "null",
    }).spawn();
  // denit: the attack on its own endpoint.
  const underAttack = async (): Promise<Record<string, number>> => {
    const denitPort = 17641;
    const supervised = new Deno.Command(PROBE, {
      args: [
        "siglat",
        String(count),
        DENIT,
        "-s",
        "--health-addr",
        `127.0.0.1:${denitPort}`,
        "--",
      ],
      stdout: "piped",
      stderr: "null",
    }).spawn();
    awaitPort(denitPort);
    const denitAttack = attack(denitPort);
    const out = JSON.parse(new TextDecoder().decode((await supervised.output()).stdout).trim());
    await denitAttack.status;
    return out;
  };
  // tini: the same attack on a bare Deno.serve beside it (tini has no endpoint): the load alone.
  const besideAttack = async (): Promise<Record<string, number>> => {
    const floorPort = 17642;
    const server = new Deno.Command(DENO, {
      args: [...RUN, `${HERE}floor_serve.js`, String(floorPort)],
      stdout: "null",
    }).spawn();
    awaitPort(floorPort);
    const tiniAttack = attack(floorPort);
    const out = probe(["siglat", String(count), "tini", "-s", "--"]);
    await tiniAttack.status;
    server.kill("SIGTERM");
    await server.status;
    return out;
  };
  const runs: Record<"denit" | "tini", Array<Record<string, number>>> = { denit: [], tini: [] };
  for (let round = 0; round < repeats; round++) {
    for (const name of shuffled(["denit", "tini"] as const)) {
      runs[name].push(name === "denit" ? await underAttack() : await besideAttack());
    }
  }
  const of = (name: "denit" | "tini", key: string) => median(runs[name].map((r) => r[key] ?? NaN));
  return {
    denitMedianUs: of("denit", "median_us"),
    denitP99Us: of("denit", "p99_us"),
    denitLost: runs.denit.reduce((sum, r) => sum + (r.lost ?? NaN), 0),
    tiniMedianUs: of("tini", "median_us"),
    tiniP99Us: of("tini", "p99_us"),
  };
}

function signals(count: number): Figures["signals"] {
  log(`signal forwarding: ${count} signals per supervisor`);
  const argv = recordOf(
    SIGNAL_ROWS,
    (name) => name === "direct" ? ["--"] : name === "floor" ? FLOOR_FORWARD : SUPERVISORS[name],
  );
  const measured = new Map<string, Record<string, number>>();
  for (const name of shuffled(SIGNAL_ROWS)) {
    measured.set(name, probe(["siglat", String(count), ...argv[name]]));
  }
  return recordOf(SIGNAL_ROWS, (name) => {
    const r = measured.get(name) ?? {};
    return {
      medianUs: r.median_us ?? NaN,
      p99Us: r.p99_us ?? NaN,
      maxUs: r.max_us ?? NaN,
      cpuUs: r.cpu_us ?? NaN,
      lost: r.lost ?? NaN,
      count: r.count ?? NaN,
    };
  });
}

function reaping(count: number, repeats: number, streamRate: number): Figures["reaping"] {
  log(`reaping: ${count} orphans at once, ${repeats} rounds; a stream of ${streamRate}/s`);
  const pidns = ["unshare", "--pid", "--fork", "--mount-proc"];
  const burst = new Map<Supervisor, Array<Record<string, number>>>();
  const drain = new Map<Supervisor, Array<Record<string, number>>>();
  const record = (
    map: Map<Supervisor, Array<Record<string, number>>>,
    name: Supervisor,
    out: Deno.CommandOutput,
  ) => {
    const runs = map.get(name) ?? [];
    runs.push(JSON.parse(new TextDecoder().decode(out.stdout).trim()));
    map.set(name, runs);
  };
  for (let round = 0; round < repeats; round++) {
    for (const name of shuffled(NAMES)) {
      const argv = [...pidns, ...AS_PID1[name], PROBE, "orphans", "burst", String(count)];
      record(burst, name, command(argv).outputSync());
      const zombies = [...pidns, ...AS_PID1[name], PROBE, "zombies", String(count)];
      record(drain, name, command(zombies).outputSync());
    }
  }
  return recordOf(NAMES, (name) => {
    const stream = (() => {
      const argv = [
        ...pidns,
        ...AS_PID1[name],
        PROBE,
        "orphans",
        "stream",
        String(streamRate),
        "5",
      ];
      const out = command(argv).outputSync();
      return JSON.parse(new TextDecoder().decode(out.stdout).trim());
    })();
    const runs = burst.get(name) ?? [];
    const drained = drain.get(name) ?? [];
    return {
      drainPerSecond: median(drained.map((r) => r.per_second ?? NaN)),
      drainLeft: Math.max(...drained.map((r) => r.left ?? NaN)),
      drainSigP50Us: median(drained.map((r) => r.sig_p50_us ?? NaN)),
      drainSigP99Us: median(drained.map((r) => r.sig_p99_us ?? NaN)),
      drainSignals: drained.reduce((sum, r) => sum + (r.signals ?? 0), 0),
      drainLost: drained.reduce((sum, r) => sum + (r.lost ?? 0), 0),
      perSecond: median(runs.map((r) => r.per_second ?? NaN)),
      peak: Math.max(...runs.map((r) => r.peak ?? NaN)),
      left: Math.max(...runs.map((r) => r.left ?? NaN)),
      streamPeakBacklog: stream.peak_backlog,
      streamLeft: stream.left,
    };
  });
}

function exitPropagation(repeats: number): Figures["exit"] {
  log(`exit propagation: ${repeats} rounds`);
  const argv = recordOf(
    EXIT_ROWS,
    (name) =>
      name === "direct" ? ["--"] : name === "floor"
        ? [DENO, ...RUN, `${HERE}floor_spawn.js`, "--"]
        // The health server must not delay the exit: the same with it listening.
        : name === "denitHealth"
        ? [DENIT, "-s", "--health-addr", "127.0.0.1:0", "--"]
        : SUPERVISORS[name],
  );
  const runs = new Samples<typeof EXIT_ROWS[number]>();
  for (let round = 0; round < repeats; round++) {
    for (const name of shuffled(EXIT_ROWS)) {
      runs.push(name, probe(["exitlat", ...argv[name]]).us ?? NaN);
    }
  }
  return recordOf(EXIT_ROWS, (name) => runs.median(name));
}

function wrk(url: string, seconds: number): { rps: number; p50Ms: number; p99Ms: number } {
  const out = new Deno.Command("wrk", {
    args: ["-t2", "-c50", `-d${seconds}s`, "--latency", url],
    stdout: "piped",
  }).outputSync();
  const text = new TextDecoder().decode(out.stdout);
  const ms = (label: string) => {
    const m = new RegExp(`^\\s+${label}\\s+([\\d.]+)(us|ms|s)`, "m").exec(text);
    if (m === null) return NaN;
    return Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "s" ? 1000 : 1);
  };
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]),
    p50Ms: ms("50%"),
    p99Ms: ms("99%"),
  };
}

async function waitListening(port: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`nothing listens on ${port}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

async function health(seconds: number): Promise<Figures["health"]> {
  log(`health: wrk -c50 for ${seconds}s against the floor, denit, and denit while reaping`);
  const result = new Map<string, Figures["health"]["floor"]>();
  // 1,000 orphans per second for as long as wrk runs, and a little longer.
  const orphanStream = [PROBE, "orphans", "stream", "1000", String(seconds + 3)];
  const servers: Array<[typeof HEALTH_ROWS[number], string[]]> = [
    ["floor", [DENO, ...RUN, `${HERE}floor_serve.js`, "17631"]],
    ["floorClose", [DENO, ...RUN, `${HERE}floor_serve.js`, "17635", "close"]],
    ["denit", [
      DENIT,
      "-s",
      "--health-addr",
      "127.0.0.1:17632",
      "--",
      "sleep",
      "600",
    ]],
    ["denitReaping", [
      "unshare",
      "--pid",
      "--fork",
      "--mount-proc",
      "--kill-child",
      DENIT,
      "--health-addr",
      "127.0.0.1:17633",
      "--",
      ...orphanStream,
    ]],
  ];
  // The floor again under the same orphan load, made beside it by tini as PID 1: what the
  // load costs any server on these two cores, as against what denit's reaping costs.
  servers.push(["floorReaping", [DENO, ...RUN, `${HERE}floor_serve.js`, "17634"]]);
  for (const [name, argv] of servers) {
    const port = Number(/1763\d/.exec(argv.join(" "))?.[0]);
    const load = name !== "floorReaping" ? null : new Deno.Command("unshare", {
      args: ["--pid", "--fork", "--mount-proc", "--kill-child", "tini", "--", ...orphanStream],
      stdout: "null",
    }).spawn();
    const [program = "", ...args] = argv;
    const child = new Deno.Command(program, { args, stdout: "piped", stderr: "null" }).spawn();
    const stdout = new Response(child.stdout).text();
    try {
      await waitListening(port);
      const path = name.startsWith("floor") ? "/" : "/healthz";
      result.set(name, { ...wrk(`http://127.0.0.1:${port}${path}`, seconds), zombiesLeft: null });
    } finally {
      if (name !== "denitReaping") child.kill("SIGTERM");
    }
    await child.status;
    await load?.status;
    const measured = result.get(name);
    if (name === "denitReaping" && measured !== undefined) {
      measured.zombiesLeft = JSON.parse((await stdout).trim()).left;
    }
  }
  const missing = { rps: NaN, p50Ms: NaN, p99Ms: NaN, zombiesLeft: null };
  return recordOf(HEALTH_ROWS, (name) => result.get(name) ?? missing);
}

function sh(command: string): void {
  const out = new Deno.Command("sh", { args: ["-c", command], stderr: "inherit" }).outputSync();
  if (!out.success) throw new Error(`failed: ${command}`);
}

function copy(repeats: number): Figures["copy"] {
  const dir = `${OUT}/tmpfs`;
  log(`copy: a 512 MiB file and 20,000 files of 4 KiB on a tmpfs, ${repeats} rounds`);
  Deno.mkdirSync(dir, { recursive: true });
  // tmpfs: the disk of these machines varies tenfold from run to run; memory does not.
  sh(`mountpoint -q ${dir} || mount -t tmpfs -o size=3g tmpfs ${dir}`);
  try {
    sh(`mkdir -p ${dir}/big ${dir}/small && head -c 512M /dev/urandom > ${dir}/big/file`);
    sh(
      `cd ${dir}/small && for a in $(seq 20); do for b in $(seq 10); do mkdir -p d$a/e$b; done; done`,
    );
    const blob = crypto.getRandomValues(new Uint8Array(4096));
    for (let a = 1; a <= 20; a++) {
      for (let b = 1; b <= 10; b++) {
        for (let c = 0; c < 100; c++) Deno.writeFileSync(`${dir}/small/d${a}/e${b}/f${c}`, blob);
      }
    }
    const result = new Map<string, Figures["copy"]["big"]>();
    const argvFor = (tool: string, fixture: string) =>
      tool === "cp"
        ? ["cp", "-a", `${dir}/${fixture}`, `${dir}/out`]
        : [DENIT, "copy", `${dir}/${fixture}/.`, `${dir}/out`];
    for (const fixture of COPY_ROWS) {
      // One untimed round each first: the first copies after the fixture was written run at
      // half speed for cp and denit alike (page allocation on the fresh tmpfs).
      for (const tool of ["cp", "denit"]) {
        sh(`rm -rf ${dir}/out`);
        probe(["time", ...argvFor(tool, fixture)]);
      }
      const runs = new Samples<"cp" | "denit">();
      for (let round = 0; round < repeats; round++) {
        for (const tool of shuffled(["cp", "denit"] as const)) {
          sh(`rm -rf ${dir}/out`);
          runs.push(tool, (probe(["time", ...argvFor(tool, fixture)]).us ?? NaN) / 1000);
        }
      }
      result.set(fixture, { cpMs: runs.median("cp"), denitMs: runs.median("denit") });
    }
    return recordOf(COPY_ROWS, (name) => result.get(name) ?? { cpMs: NaN, denitMs: NaN });
  } finally {
    sh(`umount ${dir} && rmdir ${dir}`);
  }
}

function copyMemory(files: number): Figures["copyMemory"] {
  const dir = `${OUT}/tmpfs`;
  log(`copy memory: ${files} files of 100 bytes on a tmpfs, once each`);
  Deno.mkdirSync(dir, { recursive: true });
  sh(`mountpoint -q ${dir} || mount -t tmpfs -o size=4g tmpfs ${dir}`);
  try {
    const perDir = 100;
    const blob = new Uint8Array(100).fill(120);
    for (let d = 0; d < files / perDir; d++) {
      const path = `${dir}/many/d${Math.floor(d / 100)}/e${d % 100}`;
      Deno.mkdirSync(path, { recursive: true });
      for (let f = 0; f < perDir; f++) Deno.writeFileSync(`${path}/f${f}`, blob);
    }
    const measure = (argv: string[]) => {
      sh(`rm -rf ${dir}/out`);
      return probe(["time", ...argv]);
    };
    const cp = measure(["cp", "-a", `${dir}/many/.`, `${dir}/out`]);
    const denit = measure([DENIT, "copy", `${dir}/many/.`, `${dir}/out`]);
    return {
      files,
      denitKiB: denit.maxrss_kb ?? NaN,
      cpKiB: cp.maxrss_kb ?? NaN,
      denitMs: (denit.us ?? NaN) / 1000,
      cpMs: (cp.us ?? NaN) / 1000,
    };
  } finally {
    sh(`umount ${dir} && rmdir ${dir}`);
  }
}

/** Starts the load generator on `socket`; resolves once every client finished a round. */
async function startLoad(socket: string): Promise<Deno.ChildProcess> {
  const load = new Deno.Command(DENO, {
    args: [
      "run",
      "--quiet",
      "--no-config",
      "--allow-all",
      `${HERE}jobs_load.ts`,
      `${HERE}../proto/denit/jobs/v1/jobs.proto`,
      socket,
      String(LOAD_CLIENTS),
      String(256 * 1024),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = load.stdout.getReader();
  let seen = "";
  while (!seen.includes("loaded\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the load generator ended before it loaded: ${seen}`);
    seen += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return load;
}

async function stopLoad(load: Deno.ChildProcess): Promise<{ rounds: number; bytes: number }> {
  try {
    load.kill("SIGTERM");
  } catch {
    // It ended already: its clients' service went away with the measured denit.
  }
  const text = new TextDecoder().decode((await load.output()).stdout).trim().split("\n").at(-1);
  return JSON.parse(text ?? "{}");
}

/** Clients of the job service that Run and stream at once, in the signal-under-load figures. */
const LOAD_CLIENTS = 50;

/**
 * Signal forwarding while 50 clients Run jobs and stream their output at full speed: denit
 * forwarding to its main child while it is the PID 1 of that job service, and beside the same
 * load (aimed at another denit) tini and the Deno floor (floor_forward.js: what the runtime's
 * own signal path costs under that load, with no job service in the process). The load starts
 * before the signals, which wait for it (PROBE_SETTLE_MS).
 */
async function jobsSignals(
  count: number,
  repeats: number,
): Promise<Exclude<Figures["jobsSignals"], undefined>> {
  log(
    `signals while ${LOAD_CLIENTS} job clients Run and stream: ${count} signals, ${repeats} rounds`,
  );
  const dir = await Deno.makeTempDir({ prefix: "denit-bench-load-" });
  const options = (name: string) => [
    "--jobs-socket",
    `${dir}/${name}.sock`,
    "--jobs-spool",
    `${dir}/${name}-spool`,
  ];
  type Runner = "denit" | "tini" | "floor";
  const runs: Record<Runner, Array<Record<string, number>>> = { denit: [], tini: [], floor: [] };
  // tini and the Deno floor have no job service: the same load is aimed at another denit.
  const beside: Record<Exclude<Runner, "denit">, string[]> = {
    tini: SUPERVISORS.tini,
    floor: FLOOR_FORWARD,
  };
  let rounds = 0;
  try {
    for (let round = 0; round < repeats; round++) {
      for (const name of shuffled(["denit", "tini", "floor"] as const)) {
        const tag = `${name}-${round}`;
        if (name === "denit") {
          const measured = new Deno.Command(PROBE, {
            args: ["siglat", String(count), DENIT, "-s", ...options(tag), "--"],
            env: { PROBE_SETTLE_MS: "1000" },
            stdout: "piped",
            stderr: "null",
          }).spawn();
          const load = await startLoad(`${dir}/${tag}.sock`);
          const out = new TextDecoder().decode((await measured.output()).stdout).trim();
          rounds += (await stopLoad(load)).rounds;
          runs.denit.push(JSON.parse(out));
        } else {
          const target = new Deno.Command(DENIT, {
            args: ["-s", ...options(tag), "--", "sleep", "600"],
            stdout: "null",
            stderr: "null",
          }).spawn();
          const load = await startLoad(`${dir}/${tag}.sock`);
          const out = new TextDecoder().decode(
            (await new Deno.Command(PROBE, {
              args: ["siglat", String(count), ...beside[name]],
              stdout: "piped",
            }).output()).stdout,
          ).trim();
          rounds += (await stopLoad(load)).rounds;
          target.kill("SIGTERM");
          await target.status;
          runs[name].push(JSON.parse(out));
        }
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  const of = (name: Runner, key: string) => median(runs[name].map((r) => r[key] ?? NaN));
  const most = (name: Runner) => Math.max(...runs[name].map((r) => r.max_us ?? NaN));
  return {
    clients: LOAD_CLIENTS,
    jobsRun: rounds,
    denitMedianUs: of("denit", "median_us"),
    denitP99Us: of("denit", "p99_us"),
    denitMaxUs: most("denit"),
    denitLost: runs.denit.reduce((sum, r) => sum + (r.lost ?? NaN), 0),
    tiniMedianUs: of("tini", "median_us"),
    tiniP99Us: of("tini", "p99_us"),
    tiniMaxUs: most("tini"),
    floorMedianUs: of("floor", "median_us"),
    floorP99Us: of("floor", "p99_us"),
    floorMaxUs: most("floor"),
  };
}

/** The pids limit of the fork bomb in the signals-beside-a-bomb figures. */
const BOMB_PIDS = 100;

/** Makes a v1 pids cgroup limited to BOMB_PIDS; null where there is none to make. */
function bombCgroup(tag: string): string | null {
  const dir = `/sys/fs/cgroup/pids/denit-bench-bomb-${tag}`;
  try {
    Deno.mkdirSync(dir);
    Deno.writeTextFileSync(`${dir}/pids.max`, String(BOMB_PIDS));
    return dir;
  } catch {
    return null;
  }
}

/** Kills every process of `dir` until none is left (a bomb refills what it can), then removes it. */
function endBomb(dir: string): void {
  const deadline = performance.now() + 20_000;
  while (performance.now() < deadline) {
    const pids = Deno.readTextFileSync(`${dir}/cgroup.procs`).split("\n").filter(Boolean);
    if (pids.length === 0) {
      try {
        Deno.removeSync(dir);
        return;
      } catch {
        continue; // the last ones are still leaving
      }
    }
    for (const pid of pids) {
      try {
        Deno.kill(Number(pid), "SIGKILL");
      } catch {
        // gone already
      }
    }
  }
  throw new Error(`the bomb in ${dir} outlived 20 s of SIGKILLs`);
}

/**
 * Signals to the main child while a fork bomb (`probe bomb`: every process forks for ever, and
 * tries again at the limit) holds its pids limit: under denit the bomb is a job
 * of its own service (`denit job run`); beside tini it is a sibling process; "quiet" is the same
 * denit with no bomb (what the JavaScript path costs on its own). The signals start once the bomb
 * is at its limit (PROBE_SETTLE_MS is long enough for that; counted).
 */
async function bombSignals(
  count: number,
  repeats: number,
): Promise<Exclude<Figures["bombSignals"], undefined>> {
  log(`signals beside a fork bomb at ${BOMB_PIDS} pids: ${count} signals, ${repeats} rounds`);
  type Runner = "denit" | "quiet" | "tini";
  const runs: Record<Runner, Array<Record<string, number>>> = { denit: [], quiet: [], tini: [] };
  const dir = await Deno.makeTempDir({ prefix: "denit-bench-bomb-" });
  let atLimit = 0;
  try {
    for (let round = 0; round < repeats; round++) {
      for (const name of shuffled(["denit", "quiet", "tini"] as const)) {
        const tag = `${name}-${round}-${Deno.pid}`;
        const cgroup = bombCgroup(tag);
        if (cgroup === null) return { pids: BOMB_PIDS, runs: 0 };
        const socket = `${dir}/${tag}.sock`;
        const sup = name === "tini"
          ? SUPERVISORS.tini
          : [DENIT, "-s", "--jobs-socket", socket, "--jobs-spool", `${dir}/${tag}-spool`, "--"];
        const bomb = [PROBE, "bomb", `${cgroup}/cgroup.procs`];
        if (name === "tini") new Deno.Command(PROBE, { args: bomb.slice(1) }).spawn();
        const measured = new Deno.Command(PROBE, {
          args: ["siglat", String(count), ...sup],
          env: { PROBE_SETTLE_MS: "3000" },
          stdout: "piped",
          stderr: "null",
        }).spawn();
        const job = ["job", "--socket", socket, "--wait", "2s", "run", "--", ...bomb];
        for (let tries = 0; name === "denit" && tries < 10; tries++) {
          const run = new Deno.Command(DENIT, { args: job, stdout: "null", stderr: "null" });
          if ((await run.output()).success) break;
        }
        const full = () =>
          Number(Deno.readTextFileSync(`${cgroup}/pids.current`).trim()) >= BOMB_PIDS - 5;
        for (
          const by = performance.now() + 2000;
          name !== "quiet" && !full() && performance.now() < by;
        ) {
          await new Promise((done) => setTimeout(done, 10));
        }
        if (name !== "quiet" && full()) atLimit++;
        const out = new TextDecoder().decode((await measured.output()).stdout).trim();
        endBomb(cgroup);
        runs[name].push(JSON.parse(out));
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  const of = (name: Runner, key: string) => median(runs[name].map((r) => r[key] ?? NaN));
  return {
    pids: BOMB_PIDS,
    runs: repeats,
    atLimit,
    denitMedianUs: of("denit", "median_us"),
    denitP99Us: of("denit", "p99_us"),
    denitLost: runs.denit.reduce((sum, r) => sum + (r.lost ?? NaN), 0),
    quietMedianUs: of("quiet", "median_us"),
    quietP99Us: of("quiet", "p99_us"),
    tiniMedianUs: of("tini", "median_us"),
    tiniP99Us: of("tini", "p99_us"),
  };
}

async function jobsFigures(runs: number, mebibytes: number): Promise<Figures["jobs"]> {
  log(`job service: ${runs} runs, FollowIO of ${mebibytes} MiB, 100 running jobs`);
  return await jobsBench(
    SUPERVISORS.denit,
    `${HERE}../proto/denit/jobs/v1/jobs.proto`,
    runs,
    mebibytes,
  );
}

function machine(): Figures["machine"] {
  const cpu = /^model name\s*:\s*(.*)$/m.exec(Deno.readTextFileSync("/proc/cpuinfo"))?.[1] ?? "?";
  const git = new Deno.Command("git", { args: ["rev-parse", "--short", "HEAD"], stdout: "piped" })
    .outputSync();
  const version = (argv: string[]) => {
    const [program = "", ...args] = argv;
    const out = new Deno.Command(program, { args, stdout: "piped", stderr: "piped" }).outputSync();
    return new TextDecoder().decode(out.stdout).trim().split("\n")[0] ||
      new TextDecoder().decode(out.stderr).trim().split("\n")[0] || "?";
  };
  return {
    date: new Date().toISOString().slice(0, 16).replace("T", " ") + " UTC",
    commit: new TextDecoder().decode(git.stdout).trim(),
    cpu: `${cpu}, ${navigator.hardwareConcurrency} cores`,
    kernel: Deno.osRelease(),
    memoryGiB: Math.round(Deno.systemMemoryInfo().total / (1 << 30)),
    versions: {
      tini: version(["tini", "--version"]),
      "dumb-init": version(["dumb-init", "--version"]),
      catatonit: version(["catatonit", "--version"]),
      deno: Deno.version.deno,
    },
  };
}

if (Deno.args.includes("--render")) {
  // Re-renders RESULTS.md and the chart from the last run's figures (after editing NOTES.md).
  const last: Figures = JSON.parse(Deno.readTextFileSync(`${OUT}/results.json`));
  Deno.writeTextFileSync(`${HERE}RESULTS.md`, renderResults(last));
  Deno.writeTextFileSync(`${HERE}chart.svg`, renderChart(last));
  Deno.exit(0);
}

const started = performance.now();
const figures: Figures = {
  machine: machine(),
  quick: QUICK,
  start: startOverhead(QUICK ? 5 : 60),
  memory: await memory(QUICK ? 1 : 5),
  signals: signals(QUICK ? 200 : 1000),
  hostile: await hostile(QUICK ? 300 : 1000, QUICK ? 1 : 2, QUICK ? 1 : 3),
  reaping: reaping(QUICK ? 2000 : 20000, QUICK ? 1 : 9, 2000),
  exit: exitPropagation(QUICK ? 5 : 30),
  health: await health(QUICK ? 2 : 8),
  copy: copy(QUICK ? 1 : 5),
  copyMemory: copyMemory(QUICK ? 20_000 : 200_000),
  jobs: await jobsFigures(QUICK ? 50 : 300, QUICK ? 32 : 64),
  jobsSignals: await jobsSignals(QUICK ? 300 : 1000, QUICK ? 1 : 3),
  bombSignals: await bombSignals(QUICK ? 300 : 1000, QUICK ? 1 : 3),
  docker: dockerRun(QUICK ? 3 : 10),
  sizes: sizes(QUICK ? 3 : 10),
  seconds: 0,
};
figures.seconds = Math.round((performance.now() - started) / 1000);
Deno.writeTextFileSync(`${OUT}/results.json`, JSON.stringify(figures, null, 2));
Deno.writeTextFileSync(`${HERE}RESULTS.md`, renderResults(figures));
Deno.writeTextFileSync(`${HERE}chart.svg`, renderChart(figures));
log(`done in ${figures.seconds} s: bench/RESULTS.md, bench/chart.svg`);
