// Deno floor: spawn the command with Deno.Command, wait, exit with its code.
const [command, ...args] = Deno.args;
const status = await new Deno.Command(command, { args, stdin: "inherit", stdout: "inherit" })
  .spawn().status;
Deno.exit(status.code);
