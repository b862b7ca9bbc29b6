/** The figures of one `make bench` run, and bench/RESULTS.md rendered from them. */

/** The baselines and denit. */
export const SUPERVISORS = ["tini", "dumb-init", "catatonit", "denit"] as const;
/** One of SUPERVISORS. */
export type Supervisor = typeof SUPERVISORS[number];
/** Rows of the start-up and memory tables. */
export const START_ROWS = [...SUPERVISORS, "floorEmpty", "floorSpawn", "floorFfi"] as const;
/** denit's features whose own start-up cost `make bench` reports (over the plain run). */
export const FEATURE_ROWS = ["health", "user", "timers", "jobs"] as const;
/** One of FEATURE_ROWS. */
export type Feature = typeof FEATURE_ROWS[number];
/** Rows of the signal table. */
export const SIGNAL_ROWS = ["direct", ...SUPERVISORS, "floor"] as const;
/** Rows of the exit-propagation table. */
export const EXIT_ROWS = ["direct", ...SUPERVISORS, "floor", "denitHealth"] as const;
/** Rows of the health table. */
export const HEALTH_ROWS = [
  "floor",
  "floorClose",
  "denit",
  "denitReaping",
  "floorReaping",
] as const;
/** The copy fixtures. */
export const COPY_ROWS = ["big", "small"] as const;

/** A value for each of `keys`. */
export function recordOf<K extends string, V>(
  keys: readonly K[],
  value: (key: K) => V,
): Record<K, V> {
  const out = {} as Record<K, V>; // filled for every key just below
  for (const key of keys) out[key] = value(key);
  return out;
}

/** Everything one run measured. */
export interface Figures {
  machine: {
    date: string;
    commit: string;
    cpu: string;
    kernel: string;
    memoryGiB: number;
    versions: Record<string, string>;
  };
  quick: boolean;
  /** Wall time of `SUP -- /bin/true` minus `/bin/true` alone, µs. */
  start: {
    alone: number;
    overheadUs: Record<typeof START_ROWS[number], number>;
    /** Each feature's start-up on top of the plain run, µs (absent before it was measured). */
    featureUs?: Record<Feature, number>;
  };
  memory: {
    rssKiB: Record<typeof START_ROWS[number], number>;
    hwmKiB: Record<typeof START_ROWS[number], number>;
    /** Private memory (RssAnon) and proportional share (Pss), for the same rows. */
    anonKiB?: Record<typeof START_ROWS[number], number>;
    pssKiB?: Record<typeof START_ROWS[number], number>;
    /** denit with the health endpoint listening: VmRSS and RssAnon (absent before). */
    health?: { rssKiB: number; anonKiB: number; probedAnonKiB?: number; probes?: number };
    /**
     * What a memory cgroup is charged for a denit started in it while another denit already
     * runs elsewhere (the runtime's file pages are then page cache charged to the first):
     * v1 memory.usage_in_bytes or v2 memory.current; null where no memory cgroup can be made.
     */
    cgroup?: { version: 1 | 2; secondKiB: number; firstKiB: number } | null;
  };
  /** Signal round trips while 50 clients Run jobs and stream at full speed (absent before). */
  jobsSignals?: {
    clients: number;
    jobsRun: number;
    denitMedianUs: number;
    denitP99Us: number;
    denitMaxUs: number;
    denitLost: number;
    tiniMedianUs: number;
    tiniP99Us: number;
    tiniMaxUs: number;
    /** A bare Deno forwarder (floor_forward.js) under the same load (absent before). */
    floorMedianUs?: number;
    floorP99Us?: number;
    floorMaxUs?: number;
  };
  /** Signal round trips while a fork bomb holds its pids limit (a job of denit's; beside tini). */
  bombSignals?: {
    pids: number;
    runs: number;
    atLimit?: number;
    denitMedianUs?: number;
    denitP99Us?: number;
    denitLost?: number;
    /** The same denit with no bomb. */
    quietMedianUs?: number;
    quietP99Us?: number;
    tiniMedianUs?: number;
    tiniP99Us?: number;
  };
  /** `docker run --rm IMG /bin/true` with denit as entrypoint and under --init; null: no Docker. */
  docker?: { runs: number; denitMs: number; initMs: number } | null;
  /** What users carry: the image (null: no Docker), `denit init`'s copy, and an init's time. */
  sizes?: {
    imageBytes: number | null;
    copyBytes: number;
    copyFiles: number;
    initMs: number;
    runs: number;
  };
  signals: Record<
    typeof SIGNAL_ROWS[number],
    {
      medianUs: number;
      p99Us: number;
      maxUs: number;
      /** The supervisor's CPU time (all its threads) per signal. */
      cpuUs: number;
      lost: number;
      count: number;
    }
  >;
  /** Signal round trips while 64 connections send 8 KiB heads to the health endpoint. */
  hostile: {
    denitMedianUs: number;
    denitP99Us: number;
    denitLost: number;
    /** tini under the same load, aimed at a bare Deno.serve beside it. */
    tiniMedianUs: number;
    tiniP99Us: number;
  };
  reaping: Record<
    Supervisor,
    {
      perSecond: number;
      peak: number;
      left: number;
      streamPeakBacklog: number;
      streamLeft: number;
      /** 20,000 zombies reparented at once: the drain alone, and signals sent during it. */
      drainPerSecond: number;
      drainLeft: number;
      drainSigP50Us: number;
      drainSigP99Us: number;
      drainSignals: number;
      drainLost: number;
    }
  >;
  /** µs from the child's _exit to the supervisor's exit seen by its parent. */
  exit: Record<typeof EXIT_ROWS[number], number>;
  health: Record<
    typeof HEALTH_ROWS[number],
    { rps: number; p50Ms: number; p99Ms: number; zombiesLeft: number | null }
  >;
  copy: Record<typeof COPY_ROWS[number], { cpMs: number; denitMs: number }>;
  /** 200,000 files of 100 bytes in 2,000 directories: peak resident memory and time. */
  copyMemory: { files: number; denitKiB: number; cpKiB: number; denitMs: number; cpMs: number };
  /** The job service (--jobs-socket); absent in results from before it existed. */
  jobs?: JobFigures | undefined;
  seconds: number;
}

import type { JobFigures } from "./jobs.ts";

function ratio(value: number, base: number): string {
  return base > 0 && Number.isFinite(value) ? `${(value / base).toFixed(2)}x` : "-";
}

function fixed(value: number, digits = 0): string {
  return Number.isFinite(value) ? value.toFixed(digits) : "-";
}

function table(head: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...rows.map(line)].join("\n");
}

/** One target: what it asks, what was measured, met or not. */
interface Verdict {
  target: string;
  measured: string;
  met: boolean;
}

function verdicts(f: Figures): Verdict[] {
  const out: Verdict[] = [];
  const s = f.start.overheadUs;
  out.push({
    target: "start overhead ≤ Deno floor (Deno.Command spawn + wait)",
    measured: `${fixed(s.denit / 1000, 2)} ms vs ${fixed(s.floorSpawn / 1000, 2)} ms`,
    met: s.denit <= s.floorSpawn,
  });
  out.push({
    target:
      "start overhead of the plain case within 2 ms of the Deno floor (Deno.Command spawn + wait)",
    measured: `${fixed(s.denit / 1000, 2)} ms vs ${fixed(s.floorSpawn / 1000, 2)} ms (+${
      fixed((s.denit - s.floorSpawn) / 1000, 2)
    } ms)`,
    met: s.denit <= s.floorSpawn + 2000,
  });
  out.push({
    target: "start overhead within 4 ms of the Deno floor (Deno.Command spawn + wait)",
    measured: `+${fixed((s.denit - s.floorSpawn) / 1000, 2)} ms`,
    met: s.denit <= s.floorSpawn + 4000,
  });
  const anon = f.memory.anonKiB;
  if (anon !== undefined) {
    const floor = Math.min(anon.floorEmpty, anon.floorSpawn);
    out.push({
      target: "PID 1's private memory (RssAnon) ≤ the Deno floors' + 0.5 MiB",
      measured: `${fixed(anon.denit / 1024, 1)} MiB vs ${fixed(floor / 1024, 1)} MiB`,
      met: anon.denit <= floor + 512,
    });
  }
  if (f.docker !== undefined && f.docker !== null) {
    out.push({
      target: "docker run --rm IMG /bin/true within 15 ms of --init (the runtime's own boot, " +
        "an empty Deno program, is in section 1)",
      measured: `${fixed(f.docker.denitMs)} ms vs ${fixed(f.docker.initMs)} ms (+${
        fixed(f.docker.denitMs - f.docker.initMs)
      } ms)`,
      met: f.docker.denitMs <= f.docker.initMs + 15,
    });
  }
  const rss = f.memory.rssKiB;
  out.push({
    target: "resident memory ≤ Deno floor + 2 MiB",
    measured: `${fixed(rss.denit / 1024, 1)} MiB vs ${fixed(rss.floorSpawn / 1024, 1)} + 2 MiB`,
    met: rss.denit <= rss.floorSpawn + 2048,
  });
  const plainAnon = f.memory.anonKiB?.denit ?? NaN;
  const healthAnon = f.memory.health?.anonKiB ?? NaN;
  out.push({
    target: "PID 1's private memory (RssAnon) with --health within 3 MiB of without",
    measured: `${fixed(healthAnon / 1024, 1)} MiB vs ${fixed(plainAnon / 1024, 1)} MiB (+${
      fixed((healthAnon - plainAnon) / 1024, 1)
    } MiB)`,
    met: healthAnon - plainAnon <= 3072,
  });
  const sig = f.signals;
  const floorSlow = sig.floor.medianUs > 2 * sig.tini.medianUs;
  out.push({
    target: floorSlow
      ? "signal median ≤ Deno floor's (Deno's own delivery is > 2x tini here) + 10%"
      : "signal median ≤ 2x tini",
    measured: `${fixed(sig.denit.medianUs)} µs; tini ${fixed(sig.tini.medianUs)} µs; floor ${
      fixed(sig.floor.medianUs)
    } µs`,
    met: floorSlow
      ? sig.denit.medianUs <= sig.floor.medianUs * 1.1
      : sig.denit.medianUs <= 2 * sig.tini.medianUs,
  });
  out.push({
    target: "CPU per forwarded signal ≤ 2x tini's",
    measured: `${fixed(sig.denit.cpuUs)} µs; tini ${fixed(sig.tini.cpuUs)} µs (${
      ratio(sig.denit.cpuUs, sig.tini.cpuUs)
    })`,
    met: sig.denit.cpuUs <= 2 * sig.tini.cpuUs,
  });
  out.push({
    target: "signal p99 < 1 ms, none lost",
    measured: `p99 ${fixed(sig.denit.p99Us)} µs, ${sig.denit.lost} lost of ${sig.denit.count}`,
    met: sig.denit.p99Us < 1000 && sig.denit.lost === 0,
  });
  const hx = f.hostile;
  out.push({
    target:
      "signals under 64 hostile health connections: median < 1 ms, p99 ≤ 1 ms (or 2x tini's under the same load, if that is more), none lost",
    measured: `median ${fixed(hx.denitMedianUs)} µs, p99 ${fixed(hx.denitP99Us)} µs; tini ${
      fixed(hx.tiniMedianUs)
    } / ${fixed(hx.tiniP99Us)} µs; ${hx.denitLost} lost`,
    met: hx.denitMedianUs < 1000 && hx.denitP99Us <= 2 * Math.max(hx.tiniP99Us, 500) &&
      hx.denitLost === 0,
  });
  const reap = f.reaping;
  out.push({
    target: "reaping ≥ 0.8x tini's zombies per second, none left",
    measured: `${fixed(reap.denit.perSecond)}/s vs tini ${
      fixed(reap.tini.perSecond)
    }/s, ${reap.denit.left} left`,
    met: reap.denit.perSecond >= 0.8 * reap.tini.perSecond && reap.denit.left === 0,
  });
  out.push({
    target:
      "draining 20,000 zombies reparented at once ≥ 0.8x tini's rate, signals forwarded during the drain: median < 1 ms, none lost",
    measured: `${fixed(reap.denit.drainPerSecond)}/s vs tini ${
      fixed(reap.tini.drainPerSecond)
    }/s (${
      ratio(reap.denit.drainPerSecond, reap.tini.drainPerSecond)
    }); signals during the drain: median ${fixed(reap.denit.drainSigP50Us)} µs, p99 ${
      fixed(reap.denit.drainSigP99Us)
    } µs (tini ${fixed(reap.tini.drainSigP50Us)} / ${
      fixed(reap.tini.drainSigP99Us)
    } µs), ${reap.denit.drainLost} lost`,
    met: reap.denit.drainPerSecond >= 0.8 * reap.tini.drainPerSecond &&
      reap.denit.drainSigP50Us < 1000 && reap.denit.drainLost === 0 && reap.denit.drainLeft === 0,
  });
  out.push({
    target: "bounded backlog under a steady stream of 2,000 orphans/s",
    measured: `peak backlog ${reap.denit.streamPeakBacklog}, ${reap.denit.streamLeft} left`,
    met: reap.denit.streamPeakBacklog < 200 && reap.denit.streamLeft === 0,
  });
  out.push({
    target: "exit propagation within 0.5 ms of the Deno floor (Deno.Command + Deno.exit)",
    measured: `${fixed(f.exit.denit / 1000, 2)} ms vs ${fixed(f.exit.floor / 1000, 2)} ms`,
    met: f.exit.denit <= f.exit.floor + 500,
  });
  const h = f.health;
  out.push({
    target:
      "health ≥ 50% of bare Deno.serve's requests/s (keep-alive), p99 < 5 ms (50 connections)",
    measured: `${fixed(h.denit.rps)} vs ${fixed(h.floor.rps)} req/s (${
      fixed(100 * h.denit.rps / h.floor.rps)
    }%), p99 ${fixed(h.denit.p99Ms, 2)} ms`,
    met: h.denit.rps >= 0.5 * h.floor.rps && h.denit.p99Ms < 5,
  });
  out.push({
    target: "health ≥ bare Deno.serve answering one request per connection (what denit does)",
    measured: `${fixed(h.denit.rps)} vs ${fixed(h.floorClose.rps)} req/s (${
      fixed(100 * h.denit.rps / h.floorClose.rps)
    }%)`,
    met: h.denit.rps >= h.floorClose.rps,
  });
  out.push({
    target:
      "while the child orphans 1,000 processes/s: ≥ 20% of the floor under the same load (a keep-alive floor against one request per connection), p99 < 5 ms; zero zombies left",
    measured: `${fixed(h.denitReaping.rps)} vs ${fixed(h.floorReaping.rps)} req/s (${
      fixed(100 * h.denitReaping.rps / h.floorReaping.rps)
    }%; ${fixed(100 * h.denitReaping.rps / h.floor.rps)}% of the unloaded floor), p99 ${
      fixed(h.denitReaping.p99Ms, 2)
    } ms, ${h.denitReaping.zombiesLeft} left`,
    met: h.denitReaping.rps >= 0.2 * h.floorReaping.rps && h.denitReaping.p99Ms < 5 &&
      h.denitReaping.zombiesLeft === 0,
  });
  for (const [fixture, c] of Object.entries(f.copy)) {
    out.push({
      target: `copy ${
        fixture === "big" ? "one 512 MiB file" : "20,000 files of 4 KiB"
      } within 1.25x of cp -a`,
      measured: `${fixed(c.denitMs)} ms vs ${fixed(c.cpMs)} ms (${ratio(c.denitMs, c.cpMs)})`,
      met: c.denitMs <= 1.25 * c.cpMs,
    });
  }
  const m = f.copyMemory;
  out.push({
    target: `copy ${m.files.toLocaleString("en")} files in bounded memory: peak RSS ≤ 160 MiB`,
    measured: `${fixed(m.denitKiB / 1024, 1)} MiB (cp -a ${fixed(m.cpKiB / 1024, 1)} MiB); ${
      fixed(m.denitMs)
    } ms vs cp -a ${fixed(m.cpMs)} ms`,
    met: m.denitKiB <= 160 * 1024,
  });
  const j = f.jobs;
  if (j !== undefined) {
    out.push({
      target:
        "job service: Run answers once the job runs, p50 ≤ 3.4 ms and p99 ≤ 13.2 ms (2x the in-process service's 1.7 / 6.6 ms)",
      measured: `p50 ${fixed(j.runP50Us / 1000, 2)} ms, p99 ${fixed(j.runP99Us / 1000, 2)} ms`,
      met: j.runP50Us <= 3400 && j.runP99Us <= 13_200,
    });
    const js = f.jobsSignals;
    if (js !== undefined) {
      out.push({
        target:
          `job service: signals to the main child while ${js.clients} clients Run and stream, p99 within 1 ms of tini's under the same load, none lost`,
        measured: `denit median ${fixed(js.denitMedianUs)} µs, p99 ${
          fixed(js.denitP99Us)
        } µs, max ${fixed(js.denitMaxUs)} µs; tini ${fixed(js.tiniMedianUs)} / ${
          fixed(js.tiniP99Us)
        } / ${fixed(js.tiniMaxUs)} µs; ${
          js.floorP99Us === undefined
            ? ""
            : `Deno floor (a bare signal-listener forwarder) ${fixed(js.floorMedianUs ?? NaN)} / ${
              fixed(js.floorP99Us)
            } / ${fixed(js.floorMaxUs ?? NaN)} µs; `
        }${js.denitLost} lost; ${js.jobsRun} jobs run meanwhile`,
        met: js.denitP99Us <= js.tiniP99Us + 1000 && js.denitLost === 0,
      });
    }
    const b = f.bombSignals;
    if (b !== undefined && b.denitP99Us !== undefined) {
      const quiet = b.quietP99Us ?? NaN;
      const tini = b.tiniP99Us ?? NaN;
      out.push({
        target:
          `job service: signals to the main child beside a fork-bombing job (${b.pids} pids): p99 within 2x tini's beside the same bomb, or within 2x denit's own without it (where that is more), none lost`,
        measured: `denit median ${fixed(b.denitMedianUs ?? NaN)} µs, p99 ${
          fixed(b.denitP99Us)
        } µs; without the bomb ${fixed(b.quietMedianUs ?? NaN)} / ${fixed(quiet)} µs; tini ${
          fixed(b.tiniMedianUs ?? NaN)
        } / ${fixed(tini)} µs; ${b.denitLost ?? NaN} lost; the bomb at its limit in ${
          b.atLimit ?? 0
        } of ${2 * b.runs} runs`,
        met: b.denitP99Us <= 2 * Math.max(tini, quiet) && b.denitLost === 0 &&
          b.atLimit === 2 * b.runs,
      });
    }
    if (j.anonOffKiB !== undefined && j.anonIdleKiB !== undefined) {
      out.push({
        target:
          "job service: PID 1's private memory (RssAnon) with --jobs-socket within 1 MiB of without",
        measured: `${fixed(j.anonIdleKiB / 1024, 1)} MiB vs ${
          fixed(j.anonOffKiB / 1024, 1)
        } MiB; the service's own process: RssAnon ${
          fixed((j.serviceAnonKiB ?? NaN) / 1024, 1)
        } MiB, VmRSS ${fixed((j.serviceRssKiB ?? NaN) / 1024, 1)} MiB`,
        met: j.anonIdleKiB <= j.anonOffKiB + 1024,
      });
    }
    out.push({
      target:
        "job service: FollowIO ≥ 50 MiB/s (far above what a CI job prints; cat of the same spool file for scale)",
      measured: `${fixed(j.followMiBps)} MiB/s vs cat ${fixed(j.catMiBps)} MiB/s (${
        ratio(j.followMiBps, j.catMiBps)
      })`,
      met: j.followMiBps >= 50,
    });
    out.push({
      target: "job service: 100 running jobs cost ≤ 20 MiB more than the idle service",
      measured: `${fixed(j.rss100KiB / 1024, 1)} MiB vs ${
        fixed(j.rssIdleKiB / 1024, 1)
      } MiB idle (${fixed(j.rssOffKiB / 1024, 1)} MiB without the service); peak ${
        fixed(j.hwmKiB / 1024, 1)
      } MiB`,
      met: j.rss100KiB <= j.rssIdleKiB + 20 * 1024,
    });
  }
  return out;
}

function jobsSection(j: JobFigures | undefined): string[] {
  if (j === undefined) return [];
  return [
    `## 8. Job service (\`--jobs-socket\`), one denit with a real gRPC client`,
    `Run → answer (the job is running) over ${j.runs} sequential runs of \`/bin/true\`; FollowIO of a ${
      j.bytes / (1024 * 1024)
    } MiB spool from offset 0 against \`cat\` of the same file into a pipe; resident memory without the service, with it idle (after one job) and with 100 jobs running \`sleep\`. No other init has a job service: the figures stand alone.`,
    table(["measure", "value"], [
      ["Run → started, p50", `${fixed(j.runP50Us / 1000, 2)} ms`],
      ["Run → started, p99", `${fixed(j.runP99Us / 1000, 2)} ms`],
      ["floor: Deno.Command spawn of /bin/true, p50", `${fixed(j.spawnP50Us / 1000, 2)} ms`],
      ["FollowIO", `${fixed(j.followMiBps)} MiB/s`],
      ["cat of the same spool file", `${fixed(j.catMiBps)} MiB/s`],
      ["denit (PID 1) without the service, VmRSS", `${fixed(j.rssOffKiB / 1024, 1)} MiB`],
      [
        "denit (PID 1) without the service, RssAnon",
        `${fixed((j.anonOffKiB ?? NaN) / 1024, 1)} MiB`,
      ],
      [
        "denit (PID 1) with the service idle, RssAnon",
        `${fixed((j.anonIdleKiB ?? NaN) / 1024, 1)} MiB`,
      ],
      ["the service's process, idle: RssAnon", `${fixed((j.serviceAnonKiB ?? NaN) / 1024, 1)} MiB`],
      ["the service's process, idle: VmRSS", `${fixed((j.serviceRssKiB ?? NaN) / 1024, 1)} MiB`],
      ["denit with the service, idle", `${fixed(j.rssIdleKiB / 1024, 1)} MiB`],
      ["denit with 100 running jobs", `${fixed(j.rss100KiB / 1024, 1)} MiB`],
      ["denit's peak (VmHWM) over the section", `${fixed(j.hwmKiB / 1024, 1)} MiB`],
    ]),
  ];
}

/** How the start and memory tables name their rows. */
const ROW_NAMES: Partial<Record<typeof START_ROWS[number], string>> = {
  floorEmpty: "Deno floor: empty program",
  floorSpawn: "Deno floor: Deno.Command spawn + wait",
  floorFfi: "Deno floor + FFI: the same after Deno.dlopen of 9 libc symbols",
};

/** The options each feature row adds (bench/run.ts featureArgs). */
const FEATURE_OPTIONS: Record<Feature, string> = {
  health: "--health-addr 127.0.0.1:0",
  user: "--user 65534:65534",
  timers: "--timeout 1h --grace 5s --shutdown-delay 1s",
  jobs:
    "--jobs-socket S --jobs-spool D (binds the socket; the service's process starts at the first connection)",
};

function dockerSection(d: Figures["docker"]): string[] {
  if (d === undefined) return [];
  if (d === null) {
    return ["## 9. Container start under Docker", "No Docker daemon was there: not measured."];
  }
  return [
    "## 9. Container start under Docker",
    `\`docker run --rm --network none IMG /bin/true\`, wall time, median of ${d.runs} interleaved runs: the image of \`make image\` (the rootfs form) plus a static /bin/true, with denit as its entrypoint, against the same image with \`--init --entrypoint /bin/true\` (Docker's tini).`,
    table(["entrypoint", "ms", "vs --init"], [
      ["denit", fixed(d.denitMs), ratio(d.denitMs, d.initMs)],
      ["docker run --init", fixed(d.initMs), "1.00x"],
    ]),
  ];
}

function sizesSection(z: Figures["sizes"]): string[] {
  if (z === undefined) return [];
  const mb = (bytes: number) => fixed(bytes / 1e6, 1);
  return [
    "## 10. What users carry",
    `The image of \`make image\` (the launcher, one runtime, the bundles and the runtime's C libraries), and what \`denit init DEST\` copies into an empty directory (${z.copyFiles} files), with the time that copy takes (median of ${z.runs}).`,
    table(["what", "MB", "ms"], [
      ["image (`docker image inspect`)", z.imageBytes === null ? "-" : mb(z.imageBytes), ""],
      ["`denit init` copy", mb(z.copyBytes), fixed(z.initMs)],
    ]),
  ];
}

/** bench/RESULTS.md. */
export function renderResults(f: Figures): string {
  const m = f.machine;
  const notes = (() => {
    try {
      return Deno.readTextFileSync(new URL("./NOTES.md", import.meta.url));
    } catch {
      return "";
    }
  })();
  const sections = [
    `# denit benchmark results`,
    `Generated by \`make bench\` on ${m.date}, commit \`${m.commit}\`${
      f.quick ? " (quick run)" : ""
    }; ${f.seconds} s.`,
    `Machine: ${m.cpu}, ${m.memoryGiB} GiB, Linux ${m.kernel}. Versions: ${
      Object.entries(m.versions).map(([k, v]) => `${k} ${v}`).join("; ")
    }.`,
    `Every figure is a median over interleaved repeats (supervisors in random order each round). Ratios are to tini. "Deno floor" rows are bare Deno programs: they show what the runtime costs by itself. ![chart](chart.svg)`,
    `## Targets`,
    table(
      ["target", "measured", "met"],
      verdicts(f).map((v) => [v.target, v.measured, v.met ? "yes" : "**no**"]),
    ),
    `## 1. Start overhead (\`SUP -- /bin/true\` minus \`/bin/true\` alone, ${
      fixed(f.start.alone / 1000, 2)
    } ms)`,
    table(
      ["supervisor", "overhead ms", "vs tini"],
      START_ROWS.map((n) => [
        ROW_NAMES[n] ?? n,
        fixed(f.start.overheadUs[n] / 1000, 2),
        ratio(f.start.overheadUs[n], f.start.overheadUs.tini),
      ]),
    ),
    ...(f.start.featureUs === undefined ? [] : [
      `Each feature's own start-up, over the plain \`denit -s -- /bin/true\` in the same rounds (a feature that is off costs nothing: its code is not loaded):`,
      table(
        ["feature", "options", "added ms"],
        FEATURE_ROWS.map((n) => [
          n,
          `\`${FEATURE_OPTIONS[n]}\``,
          fixed((f.start.featureUs?.[n] ?? NaN) / 1000, 2),
        ]),
      ),
    ]),
    `## 2. Memory of the supervisor while its child sleeps`,
    `VmRSS counts the runtime's file-backed pages (page cache shared by every process of the same binary); RssAnon is the private memory; Pss shares the file pages among the processes mapping them.`,
    table(
      ["supervisor", "VmRSS MiB", "RssAnon MiB", "Pss MiB", "VmHWM MiB", "VmRSS vs tini"],
      START_ROWS.map((n) => [
        ROW_NAMES[n] ?? n,
        fixed(f.memory.rssKiB[n] / 1024, 1),
        fixed((f.memory.anonKiB?.[n] ?? NaN) / 1024, 1),
        fixed((f.memory.pssKiB?.[n] ?? NaN) / 1024, 1),
        fixed(f.memory.hwmKiB[n] / 1024, 1),
        ratio(f.memory.rssKiB[n], f.memory.rssKiB.tini),
      ]),
    ),
    ...(f.memory.health === undefined ? [] : [
      `denit with \`--health-addr 127.0.0.1:0\`: VmRSS ${
        fixed(f.memory.health.rssKiB / 1024, 1)
      } MiB, RssAnon ${fixed(f.memory.health.anonKiB / 1024, 1)} MiB; RssAnon after ${
        f.memory.health.probes ?? NaN
      } requests to /healthz ${fixed((f.memory.health.probedAnonKiB ?? NaN) / 1024, 1)} MiB.`,
    ]),
    ...(f.memory.cgroup === undefined ? [] : [
      f.memory.cgroup === null
        ? "The memory-cgroup charge: no memory cgroup could be made here."
        : `What a memory cgroup (v${f.memory.cgroup.version}) is charged for denit with \`sleep\` as its child: the first denit ${
          fixed(f.memory.cgroup.firstKiB / 1024, 1)
        } MiB, a second one started beside it in a cgroup of its own ${
          fixed(f.memory.cgroup.secondKiB / 1024, 1)
        } MiB. A cgroup pays for the runtime's file pages (~40 MiB) only if it is the first to read them into the page cache (a first container of the image on a node); here they were in the cache already, as for every later container of the image.`,
    ]),
    `## 3. Signal forwarding: \`kill(SUP, SIGUSR1)\` to the child's handler and back through a pipe`,
    `${f.signals.denit.count} signals 1 ms apart per supervisor; "direct" signals the child itself (the measuring floor).`,
    table([
      "supervisor",
      "median µs",
      "p99 µs",
      "max µs",
      "lost",
      "median vs tini",
      "CPU µs per signal",
      "CPU vs tini",
    ], [
      ...SIGNAL_ROWS.map((n) => [
        n === "floor" ? "Deno floor: listener + Deno.kill" : n,
        fixed(f.signals[n].medianUs),
        fixed(f.signals[n].p99Us),
        fixed(f.signals[n].maxUs),
        String(f.signals[n].lost),
        ratio(f.signals[n].medianUs, f.signals.tini.medianUs),
        fixed(f.signals[n].cpuUs),
        ratio(f.signals[n].cpuUs, f.signals.tini.cpuUs),
      ]),
    ]),
    `Under attack: 64 connections send 8 KiB heads (a header line of 8,000 spaces) to denit's health endpoint as fast as it answers, while 1,000 signals are timed through denit (300 with --quick; each figure the median of 3 rounds, 1 with --quick); tini is timed under the same attack aimed at a bare Deno.serve beside it (tini has no endpoint), which shows what the load alone does to signal delivery on this machine.`,
    table(["supervisor", "median µs", "p99 µs", "lost"], [
      [
        "denit (attack on its endpoint)",
        fixed(f.hostile.denitMedianUs),
        fixed(f.hostile.denitP99Us),
        String(f.hostile.denitLost),
      ],
      [
        "tini (same attack elsewhere)",
        fixed(f.hostile.tiniMedianUs),
        fixed(f.hostile.tiniP99Us),
        "-",
      ],
    ]),
    `## 4. Reaping as PID 1 of a PID namespace`,
    `A burst: orphans that all exit at once (zombies reaped per second from release to none left, and the largest count seen); then a steady stream of 2,000 orphans per second for 5 s (the largest backlog seen, sampled every 50 orphans).`,
    table(
      ["supervisor", "reaped/s", "vs tini", "peak", "left", "stream peak backlog", "stream left"],
      SUPERVISORS.map((n) => [
        n,
        fixed(f.reaping[n].perSecond),
        ratio(f.reaping[n].perSecond, f.reaping.tini.perSecond),
        String(f.reaping[n].peak),
        String(f.reaping[n].left),
        String(f.reaping[n].streamPeakBacklog),
        String(f.reaping[n].streamLeft),
      ]),
    ),
    `Zombies reparented at once: one process parks 20,000 exited children and exits, so PID 1 inherits 20,000 zombies in one step (the drain alone, not fork or exit speed); meanwhile the probe sends SIGUSR1 to PID 1 every millisecond and times its return through the supervisor. The drain's end is the moment the last-forked zombie is gone (reaped in fork order; a count of what is left confirms it), seen within a round of the probe; the time includes the parker's exit, about 13 ms, in which the kernel reparents the zombies. The C inits drain in one loop and forward nothing until it ends.`,
    table(
      [
        "supervisor",
        "drained/s",
        "vs tini",
        "left",
        "signals",
        "lost",
        "signal median µs",
        "p99 µs",
      ],
      SUPERVISORS.map((n) => [
        n,
        fixed(f.reaping[n].drainPerSecond),
        ratio(f.reaping[n].drainPerSecond, f.reaping.tini.drainPerSecond),
        String(f.reaping[n].drainLeft),
        String(f.reaping[n].drainSignals),
        String(f.reaping[n].drainLost),
        fixed(f.reaping[n].drainSigP50Us),
        fixed(f.reaping[n].drainSigP99Us),
      ]),
    ),
    `## 5. Exit propagation: the child's \`_exit\` to the supervisor's exit seen by its parent`,
    table(["supervisor", "ms", "vs tini"], [
      ...(["direct", ...SUPERVISORS] as const).map((
        n,
      ) => [
        n === "direct" ? "no supervisor (child's own teardown)" : n,
        fixed(f.exit[n] / 1000, 2),
        ratio(f.exit[n], f.exit.tini),
      ]),
      [
        "denit with the health endpoint listening",
        fixed(f.exit.denitHealth / 1000, 2),
        ratio(f.exit.denitHealth, f.exit.tini),
      ],
      [
        "Deno floor: Deno.Command + Deno.exit",
        fixed(f.exit.floor / 1000, 2),
        ratio(f.exit.floor, f.exit.tini),
      ],
    ]),
    `## 6. Health endpoint under \`wrk -t2 -c50\` on loopback`,
    table(["server", "requests/s", "vs floor", "p50 ms", "p99 ms", "zombies left"], [
      [
        "Deno floor: bare Deno.serve hello world",
        fixed(f.health.floor.rps),
        "1.00x",
        fixed(f.health.floor.p50Ms, 2),
        fixed(f.health.floor.p99Ms, 2),
        "-",
      ],
      [
        "Deno floor: Deno.serve, one request per connection (connection: close)",
        fixed(f.health.floorClose.rps),
        ratio(f.health.floorClose.rps, f.health.floor.rps),
        fixed(f.health.floorClose.p50Ms, 2),
        fixed(f.health.floorClose.p99Ms, 2),
        "-",
      ],
      [
        "denit /healthz (one request per connection)",
        fixed(f.health.denit.rps),
        ratio(f.health.denit.rps, f.health.floor.rps),
        fixed(f.health.denit.p50Ms, 2),
        fixed(f.health.denit.p99Ms, 2),
        "-",
      ],
      [
        "denit /healthz, child orphaning 1,000/s",
        fixed(f.health.denitReaping.rps),
        ratio(f.health.denitReaping.rps, f.health.floor.rps),
        fixed(f.health.denitReaping.p50Ms, 2),
        fixed(f.health.denitReaping.p99Ms, 2),
        String(f.health.denitReaping.zombiesLeft),
      ],
      [
        "Deno floor under the same orphan load (tini reaping beside it)",
        fixed(f.health.floorReaping.rps),
        ratio(f.health.floorReaping.rps, f.health.floor.rps),
        fixed(f.health.floorReaping.p50Ms, 2),
        fixed(f.health.floorReaping.p99Ms, 2),
        "-",
      ],
    ]),
    `## 7. Copy mode against \`cp -a\` (on a tmpfs)`,
    table(
      ["fixture", "cp -a ms", "denit copy ms", "denit vs cp"],
      Object.entries(f.copy).map(([fixture, c]) => [
        fixture === "big" ? "one 512 MiB file" : "20,000 files of 4 KiB, 200 directories",
        fixed(c.cpMs),
        fixed(c.denitMs),
        ratio(c.denitMs, c.cpMs),
      ]),
    ),
    `Memory with the tree's size: ${
      f.copyMemory.files.toLocaleString("en")
    } files of 100 bytes in ${
      (f.copyMemory.files / 100).toLocaleString("en")
    } directories, one run each (peak resident memory from wait4).`,
    table(["tool", "ms", "peak RSS MiB"], [
      ["cp -a", fixed(f.copyMemory.cpMs), fixed(f.copyMemory.cpKiB / 1024, 1)],
      ["denit copy", fixed(f.copyMemory.denitMs), fixed(f.copyMemory.denitKiB / 1024, 1)],
    ]),
    ...jobsSection(f.jobs),
    ...dockerSection(f.docker),
    ...sizesSection(f.sizes),
    notes,
  ];
  return `${sections.join("\n\n").trimEnd()}\n`;
}
