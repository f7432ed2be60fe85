// The shop's agent on the OpenAI Agents SDK for JavaScript, as a program of its own that agenttest runs (`runtime:
// process`, `protocol: jsonl`): one JSON line per user turn on stdin — {"turn", "message", "messages", "state"} —
// and one line back on stdout, {"reply": "…"}. Logs go to stderr only: stdout carries nothing but the reply.
//
// Nothing here knows agenttest beyond two addresses it is given: the SDK's OpenAI client reads OPENAI_BASE_URL and
// OPENAI_API_KEY (under agenttest, its model gateway and a key made for the turn), and the shop's tools come from the
// MCP server at AGENTTEST_MCP_URL, which takes the same key as a bearer token.

import { createInterface } from 'node:readline';

import {
  Agent,
  type AgentInputItem,
  MCPServerStreamableHttp,
  assistant,
  run,
  setTracingDisabled,
  user,
} from '@openai/agents';

const INSTRUCTIONS =
  "You are the shop's customer-service agent. To refund an order: look it up with shop_find_order, refund it with " +
  'shop_refund_order only if it was delivered, then tell the customer in one sentence what you did.';

// The conversation as agenttest writes it: OpenAI chat messages, this turn's user message last.
interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content?: string | null;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

interface Turn {
  turn: number;
  message: string;
  messages: ChatMessage[];
  state: Record<string, unknown>;
}

// The SDK's own input items for the conversation so far, earlier turns' tool calls and results included, so the
// model sees what it already did.
function inputItems(messages: ChatMessage[]): AgentInputItem[] {
  const toolNames = new Map<string, string>();
  const items: AgentInputItem[] = [];
  for (const message of messages) {
    if (message.role === 'user') {
      items.push(user(message.content ?? ''));
    } else if (message.role === 'assistant') {
      if (message.content) {
        items.push(assistant(message.content));
      }
      for (const call of message.tool_calls ?? []) {
        toolNames.set(call.id, call.function.name);
        items.push({
          type: 'function_call',
          callId: call.id,
          name: call.function.name,
          arguments: call.function.arguments,
          status: 'completed',
        });
      }
    } else if (message.role === 'tool' && message.tool_call_id) {
      items.push({
        type: 'function_call_result',
        callId: message.tool_call_id,
        name: toolNames.get(message.tool_call_id) ?? '',
        status: 'completed',
        output: message.content ?? '',
      });
    }
  }
  return items;
}

async function answer(turn: Turn): Promise<string> {
  const url = process.env.AGENTTEST_MCP_URL;
  if (!url) {
    throw new Error('AGENTTEST_MCP_URL is not set: the shop tools are served over MCP by agenttest');
  }
  const shopTools = new MCPServerStreamableHttp({
    name: 'shop',
    url,
    requestInit: { headers: { Authorization: `Bearer ${process.env.OPENAI_API_KEY ?? ''}` } },
  });
  await shopTools.connect();
  try {
    const agent = new Agent({
      name: 'shop',
      instructions: INSTRUCTIONS,
      model: 'gpt-4o-mini',
      mcpServers: [shopTools],
    });
    const result = await run(agent, inputItems(turn.messages));
    return String(result.finalOutput ?? '');
  } finally {
    await shopTools.close();
  }
}

async function readTurn(): Promise<Turn> {
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    if (line.trim()) {
      return JSON.parse(line) as Turn;
    }
  }
  throw new Error('no turn on stdin');
}

async function main(): Promise<void> {
  // The SDK exports traces to api.openai.com by default: a call outside the model gateway, which agenttest's seal
  // counts as the program reaching the network itself.
  setTracingDisabled(true);
  try {
    const reply = await answer(await readTurn());
    process.stdout.write(`${JSON.stringify({ reply })}\n`);
  } catch (error) {
    console.error(error);
    process.stdout.write(`${JSON.stringify({ error: error instanceof Error ? error.message : String(error) })}\n`);
    process.exitCode = 1;
  }
}

await main();
