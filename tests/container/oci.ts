/**
 * Runs real OCI containers with runc: writes a bundle (config.json around a rootfs folder),
 * `runc run`s it in the foreground, and always removes the container and the bundle.
 */

import { ROOT } from "../helpers.ts";

/**
 * The denit rootfs (`make rootfs`) and its entrypoint /denit: the launcher that starts the
 * image's Deno on the bundle.
 */
export const DENIT_ROOTFS = `${ROOT}dist/rootfs`;
export const DENIT_ENTRY = ["/denit"];
/** The signal echo (fixtures/signal_echo.c), from the read-only /test mount. */
export const ECHO = ["/test/signal_echo"];
/** The test child, run by the image's Deno from the read-only /fixtures mount. */
export const CHILD = [
  "/deno",
  "run",
  "--quiet",
  "--no-config",
  "--allow-all",
  "/fixtures/container_child.ts",
];

/** True when runc can run containers here (root, runc installed). */
export const CAN_RUNC = (() => {
  try {
    return Deno.uid() === 0 &&
      new Deno.Command("runc", { args: ["--version"], stdout: "null" }).outputSync().success;
  } catch {
    return false; // runc missing: the container tests print why they skip.
  }
})();

/** How to run one container. */
export interface ContainerSpec {
  readonly rootfs: string;
  readonly args: readonly string[];
  readonly env?: readonly string[];
  readonly readonly?: boolean;
  readonly user?: { uid: number; gid: number };
  /** Host directory → container path, read-write. */
  readonly volumes?: ReadonlyArray<[string, string]>;
  /** Share the host's network namespace (for the health endpoint tests). */
  readonly hostNetwork?: boolean;
}

function bind(source: string, destination: string, readonly: boolean) {
  return {
    destination,
    type: "bind",
    source,
    options: ["rbind", readonly ? "ro" : "rw", "nosuid", "nodev"],
  };
}

// The capabilities the tests need: signal the child, chown as --chown does, run as others.
const CAPABILITIES = [
  "CAP_KILL",
  "CAP_CHOWN",
  "CAP_FOWNER",
  "CAP_DAC_OVERRIDE",
  "CAP_SETUID",
  "CAP_SETGID",
];

function config(spec: ContainerSpec): Record<string, unknown> {
  const namespaces = ["pid", "ipc", "uts", "mount", ...(spec.hostNetwork ? [] : ["network"])];
  return {
    ociVersion: "1.0.2",
    process: {
      terminal: false,
      user: spec.user ?? { uid: 0, gid: 0 },
      args: spec.args,
      env: ["PATH=/usr/bin:/bin", ...(spec.env ?? [])],
      cwd: "/",
      capabilities: {
        bounding: CAPABILITIES,
        effective: CAPABILITIES,
        permitted: CAPABILITIES,
      },
      rlimits: [{ type: "RLIMIT_NOFILE", hard: 4096, soft: 4096 }],
      noNewPrivileges: true,
    },
    root: { path: spec.rootfs, readonly: spec.readonly ?? true },
    hostname: "denit-test",
    mounts: [
      { destination: "/proc", type: "proc", source: "proc" },
      {
        destination: "/dev",
        type: "tmpfs",
        source: "tmpfs",
        options: ["nosuid", "strictatime", "mode=755", "size=65536k"],
      },
      {
        destination: "/sys",
        type: "sysfs",
        source: "sysfs",
        options: ["nosuid", "noexec", "nodev", "ro"],
      },
      {
        destination: "/tmp",
        type: "tmpfs",
        source: "tmpfs",
        options: ["nosuid", "nodev", "mode=1777", "size=65536k"],
      },
      bind(`${ROOT}fixtures`, "/fixtures", true),
      bind(`${ROOT}dist/test`, "/test", true),
      ...(spec.volumes ?? []).map(([source, destination]) => bind(source, destination, false)),
    ],
    linux: {
      namespaces: namespaces.map((type) => ({ type })),
      maskedPaths: ["/proc/kcore", "/proc/keys", "/sys/firmware"],
      readonlyPaths: ["/proc/sys", "/proc/sysrq-trigger"],
    },
  };
}

/** One container run; `runc run` in the foreground with piped output. */
export class Container {
  readonly id = `denit-test-${crypto.randomUUID().slice(0, 8)}`;
  readonly bundle: string;
  readonly process: Deno.ChildProcess;
  readonly lines: string[] = [];
  readonly #stderr: Promise<string>;
  #waiters: Array<() => void> = [];
  #closed = false;

  constructor(spec: ContainerSpec) {
    this.bundle = Deno.makeTempDirSync({ prefix: "denit-bundle-" });
    Deno.writeTextFileSync(`${this.bundle}/config.json`, JSON.stringify(config(spec), null, 1));
    this.process = new Deno.Command("runc", {
      args: ["run", "--bundle", this.bundle, this.id],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#stderr = new Response(this.process.stderr).text();
    void this.#pump();
  }

  async #pump(): Promise<void> {
    let buffer = "";
    for await (const chunk of this.process.stdout.pipeThrough(new TextDecoderStream())) {
      buffer += chunk;
      const parts = buffer.split("\n");
      buffer = parts.pop() ?? "";
      this.lines.push(...parts);
      for (const wake of this.#waiters.splice(0)) wake();
    }
    if (buffer !== "") this.lines.push(buffer);
    this.#closed = true;
    for (const wake of this.#waiters.splice(0)) wake();
  }

  /** Waits for a stdout line matching `match` (bounded). */
  async waitFor(match: RegExp, timeoutMs = 20_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = this.lines.find((l) => match.test(l));
      if (line !== undefined) return line;
      if (this.#closed) {
        throw new Error(`container ended without ${match}: ${this.lines.join("|")}`);
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${match}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** `runc kill ID SIGNAL`: what `docker stop`/`docker kill` do. */
  async kill(signal: string): Promise<void> {
    const out = await new Deno.Command("runc", { args: ["kill", this.id, signal], stderr: "piped" })
      .output();
    if (!out.success) {
      throw new Error(`runc kill ${signal}: ${new TextDecoder().decode(out.stderr)}`);
    }
  }

  /** The container's exit status (runc run passes the init's status through), bounded. */
  async status(timeoutMs = 30_000): Promise<{ code: number; stderr: string }> {
    const timer = setTimeout(() => void this.kill("KILL").catch(() => {}), timeoutMs);
    const status = await this.process.status;
    clearTimeout(timer);
    return { code: status.code, stderr: await this.#stderr };
  }

  /** Removes the container (killing it if needed) and its bundle, whatever happened. */
  async remove(): Promise<void> {
    await new Deno.Command("runc", { args: ["kill", this.id, "KILL"], stderr: "null" }).output();
    await this.process.status;
    await this.#stderr;
    await new Deno.Command("runc", { args: ["delete", "--force", this.id], stderr: "null" })
      .output();
    await Deno.remove(this.bundle, { recursive: true });
  }
}

/** Runs a container to the end and removes it; returns its exit code, stdout lines and stderr. */
export async function runContainer(
  spec: ContainerSpec,
): Promise<{ code: number; lines: string[]; stderr: string }> {
  const container = new Container(spec);
  try {
    const { code, stderr } = await container.status();
    return { code, lines: container.lines, stderr };
  } finally {
    await container.remove();
  }
}
