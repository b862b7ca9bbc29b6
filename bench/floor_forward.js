// Deno floor for signal forwarding: listeners that pass SIGUSR1 and SIGTERM on with Deno.kill.
const [command, ...args] = Deno.args;
const child = new Deno.Command(command, { args, stdout: "inherit" }).spawn();
for (const signal of ["SIGUSR1", "SIGTERM"]) {
  Deno.addSignalListener(signal, () => child.kill(signal));
}
const status = await child.status;
Deno.exit(status.code);
