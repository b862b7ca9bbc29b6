// Deno floor for the health endpoint: a bare Deno.serve hello world; with "close" as the
// second argument it answers one request per connection, as denit's endpoint does.
const close = Deno.args[1] === "close";
Deno.serve(
  { hostname: "127.0.0.1", port: Number(Deno.args[0]), onListen() {} },
  () => new Response("ok\n", close ? { headers: { connection: "close" } } : {}),
);
