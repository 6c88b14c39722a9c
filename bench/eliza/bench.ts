// elizaOS 1.7.2 side of troupe's side-by-side benchmark (bench/compare.sh runs it with bun).
//
// It builds one AgentRuntime the way an elizaOS project does (plugin-sql on in-memory PGlite,
// a character, a model plugin), with a model plugin that answers at once, and pushes messages
// through the runtime's own message path: `runtime.messageService.handleMessage`, the call
// elizaOS's server and its platform plugins make for every incoming message. The callback
// stores the reply as a memory, which is what those clients do with it. Two modes:
//   --mode core       plugin-sql + the mock model only (core's DefaultMessageService);
//   --mode bootstrap  the same plus @elizaos/plugin-bootstrap (its providers, actions, the
//                     reflection evaluator and the embedding service a normal agent runs).
// The phases mirror `troupe bench`: latency (one room, one message after the other, each
// after the previous answer) and throughput (--rooms conversations at once). Rooms are DMs,
// as troupe bench's messages are direct, so neither side asks a model whether to answer.
// Rooms, entities and worlds are set up before timing starts (generous to elizaOS: its
// platform clients call ensureConnection for every message).
//
// Output: a line `READY` once the runtime is initialized (the driver times start to ready
// from its own clock), then one JSON object with the figures.

import { AgentRuntime, ChannelType, ModelType, stringToUuid } from "@elizaos/core";
import type { Character, Memory, Plugin, UUID } from "@elizaos/core";
import sqlPlugin, { createDatabaseAdapter } from "@elizaos/plugin-sql";
import { readFileSync } from "node:fs";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const mode = arg("mode", "core");
const latencyMessages = Number(arg("latency-messages", "300"));
const totalMessages = Number(arg("messages", "300"));
const rooms = Math.max(1, Number(arg("rooms", "10")));
const warmup = Number(arg("warmup", "2"));
if (mode !== "core" && mode !== "bootstrap") {
  console.error(`unknown --mode ${mode} (core | bootstrap)`);
  process.exit(2);
}

// What a model that answers at once says: the XML the message handler template asks for, so
// the handler parses it on the first try and replies (no retries, no IGNORE).
const REPLY =
  "<response><thought>answer briefly</thought><actions>REPLY</actions>" +
  "<providers></providers><text>ok, noted.</text></response>";
const DIM = 384;
const EMBEDDING = Array.from({ length: DIM }, (_, i) => (i === 0 ? 1 : 0));

const instantModel: Plugin = {
  name: "bench-instant-model",
  description: "answers every model call at once (zero latency), for measuring the runtime",
  priority: 100,
  models: {
    [ModelType.TEXT_SMALL]: async () => REPLY,
    [ModelType.TEXT_LARGE]: async () => REPLY,
    [ModelType.TEXT_EMBEDDING]: async () => EMBEDDING,
    [ModelType.OBJECT_SMALL]: async () => ({}),
    [ModelType.OBJECT_LARGE]: async () => ({}),
  },
};

// The same persona troupe bench loads (gateway/src/bench/mod.rs), in elizaOS's shape.
const character: Character = {
  name: "Bench",
  bio: ["Bench answers at once, for measuring the gateway."],
  lore: ["Bench was made to measure."],
  style: { all: ["be brief"], chat: ["answer directly"] },
  messageExamples: [
    [
      { name: "{{user1}}", content: { text: "hi" } },
      { name: "Bench", content: { text: "hello" } },
    ],
  ],
  topics: ["latency"],
  adjectives: ["fast"],
  plugins: [],
  settings: { PGLITE_DATA_DIR: "memory://", EMBEDDING_DIMENSION: String(DIM) },
} as Character;

function rssKib(field: "VmRSS" | "VmHWM"): number {
  const line = readFileSync("/proc/self/status", "utf8")
    .split("\n")
    .find((l) => l.startsWith(field));
  return line ? Number(line.replace(/[^0-9]/g, "")) : 0;
}

const plugins: Plugin[] = [sqlPlugin as Plugin, instantModel];
if (mode === "bootstrap") {
  const bootstrap = (await import("@elizaos/plugin-bootstrap")).default as Plugin;
  plugins.push(bootstrap);
}
// elizaOS's server migrates its database before it starts agents (the runtime reads the
// agents table before it runs plugin migrations); without the server, do the same here.
const agentId = stringToUuid(`bench-agent-${crypto.randomUUID()}`);
const adapter = createDatabaseAdapter({ dataDir: "memory://" }, agentId);
await adapter.init();
await adapter.runPluginMigrations!([{ name: sqlPlugin.name, schema: sqlPlugin.schema ?? {} }], {
  verbose: false,
  force: false,
  dryRun: false,
});
const runtime = new AgentRuntime({
  agentId,
  character,
  plugins,
  adapter,
  settings: { PGLITE_DATA_DIR: "memory://" },
});
await runtime.initialize();
console.log("READY");
const idleRss = rssKib("VmRSS");

const runId = crypto.randomUUID();

async function openRoom(name: string): Promise<{ roomId: UUID; userId: UUID }> {
  const roomId = stringToUuid(`bench-room-${runId}-${name}`);
  const userId = stringToUuid(`bench-user-${runId}-${name}`);
  // A world per conversation, owned by its user: a DM is where elizaOS onboards the owner,
  // and plugin-bootstrap's settings provider fails (and logs) on every DM from a user who
  // owns no world, and its settings action on a world without settings. An owned world
  // with (empty) settings keeps elizaOS on its ordinary path.
  const worldId = stringToUuid(`bench-world-${runId}-${name}`);
  await runtime.ensureConnection({
    entityId: userId,
    roomId,
    worldId,
    worldName: "bench",
    userName: `user-${name}`,
    name: `User ${name}`,
    source: "bench",
    type: ChannelType.DM,
    channelId: `room-${name}`,
    messageServerId: worldId,
    metadata: { ownership: { ownerId: userId }, settings: {} },
  });
  return { roomId, userId };
}

// One message, answered: handleMessage returns once the reply went to the callback (which
// stores it) and the evaluators ran.
async function converse(room: { roomId: UUID; userId: UUID }, name: string, n: number): Promise<void> {
  const message: Memory = {
    id: crypto.randomUUID() as UUID,
    entityId: room.userId,
    agentId: runtime.agentId,
    roomId: room.roomId,
    content: {
      text: `message ${n} in room ${name}: how is the weather today?`,
      source: "bench",
      channelType: ChannelType.DM,
    },
    createdAt: Date.now(),
  };
  let replied = false;
  await runtime.messageService!.handleMessage(runtime, message, async (content) => {
    if (!content.text) return [];
    replied = true;
    const reply: Memory = {
      id: crypto.randomUUID() as UUID,
      entityId: runtime.agentId,
      agentId: runtime.agentId,
      roomId: room.roomId,
      content: { ...content, inReplyTo: message.id },
      createdAt: Date.now(),
    };
    await runtime.createMemory(reply, "messages");
    return [reply];
  });
  if (!replied) throw new Error(`no reply to message ${n} in room ${name}`);
}

async function conversation(name: string, count: number): Promise<number[]> {
  const room = await openRoom(name);
  const times: number[] = [];
  for (let n = 0; n < warmup + count; n++) {
    const t = performance.now();
    await converse(room, name, n);
    if (n >= warmup) times.push(performance.now() - t);
  }
  return times;
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

// What a phase cost the process, as troupe bench reports it (getrusage of the process: CPU
// user + system, voluntary + involuntary context switches), per message of the phase.
type Usage = { cpuUs: number; switches: number };
function usage(): Usage {
  const cpu = process.cpuUsage();
  const ru = typeof process.resourceUsage === "function" ? process.resourceUsage() : undefined;
  const switches = ru ? ru.voluntaryContextSwitches + ru.involuntaryContextSwitches : NaN;
  return { cpuUs: cpu.user + cpu.system, switches };
}
function cost(since: Usage, messages: number) {
  const now = usage();
  return {
    cpu_ms_per_message: (now.cpuUs - since.cpuUs) / 1000 / Math.max(1, messages),
    switches_per_message: (now.switches - since.switches) / Math.max(1, messages),
  };
}

// Phase 1: latency, one room.
const soloStart = usage();
const single = (await conversation("solo", latencyMessages)).sort((a, b) => a - b);
const soloCost = cost(soloStart, latencyMessages + warmup);

// Phase 2: throughput, `rooms` conversations at once (rooms opened inside the timed part,
// as troupe bench's rooms are created by their first message).
const perRoom = Math.ceil(totalMessages / rooms);
const manyStart = usage();
const started = performance.now();
const loaded = (
  await Promise.all(Array.from({ length: rooms }, (_, r) => conversation(String(r), perRoom)))
)
  .flat()
  .sort((a, b) => a - b);
const elapsedS = (performance.now() - started) / 1000;
const manyCost = cost(manyStart, rooms * (perRoom + warmup));
const peakRss = rssKib("VmHWM");

console.log(
  JSON.stringify({
    system: `elizaOS 1.7.2 ${mode}`,
    latency: {
      messages: single.length,
      p50_ms: pct(single, 0.5),
      p90_ms: pct(single, 0.9),
      p99_ms: pct(single, 0.99),
      ...soloCost,
    },
    throughput: {
      rooms,
      messages: rooms * (perRoom + warmup),
      per_s: (rooms * (perRoom + warmup)) / elapsedS,
      p50_ms: pct(loaded, 0.5),
      p99_ms: pct(loaded, 0.99),
      ...manyCost,
    },
    rss_mib: { idle: idleRss / 1024, peak: peakRss / 1024 },
  }),
);
await runtime.stop();
process.exit(0);
