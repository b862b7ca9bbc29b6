// Deno floor with FFI: what loading libc through Deno.dlopen costs by itself (the same nine
// symbols denit opens at start), then Deno.Command spawn + wait as in floor_spawn.js.
const lib = Deno.dlopen("libc.so.6", {
  posix_spawn: {
    parameters: ["buffer", "buffer", "buffer", "buffer", "buffer", "pointer"],
    result: "i32",
  },
  waitpid: { parameters: ["i32", "buffer", "i32"], result: "i32" },
  waitpid_blocking: {
    name: "waitpid",
    parameters: ["i32", "buffer", "i32"],
    result: "i32",
    nonblocking: true,
  },
  kill: { parameters: ["i32", "i32"], result: "i32" },
  prctl: { parameters: ["i32", "u64", "u64", "u64", "u64"], result: "i32" },
  signal: { parameters: ["i32", "usize"], result: "usize" },
  access: { parameters: ["buffer", "i32"], result: "i32" },
  __errno_location: { parameters: [], result: "pointer" },
  environ: { type: "pointer" },
});
const [command, ...args] = Deno.args;
const status = await new Deno.Command(command, { args, stdin: "inherit", stdout: "inherit" })
  .spawn().status;
lib.close();
Deno.exit(status.code);
