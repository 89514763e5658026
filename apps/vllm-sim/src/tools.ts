import { type ChatCompletionRequest, OpenAIHttpError, tokenizePrompt } from '@fairgate/openai';

/**
 * Tool calls, as vLLM answers them with a tool parser: a chat request offering `tools`
 * (tool_choice not 'none') whose last message is not a tool result is answered with one
 * call. The tool is tool_choice's named function, else the first tool; its arguments are
 * synthesized from the tool's JSON-schema `parameters` so that they validate against it.
 *
 * A call costs one decode step for its header (id and name) and one per 4-character
 * fragment of the arguments, the shared token estimate.
 */
export interface PlannedToolCall {
  name: string;
  /** The arguments as JSON text, as they go out in `function.arguments`. */
  arguments: string;
  /** `arguments` in token-sized fragments, one per decode step after the header's. */
  fragments: string[];
}

type JsonSchema = Record<string, unknown>;

/** The call a request gets, or null when it gets a text answer. */
export function planToolCall(request: ChatCompletionRequest, word: string): PlannedToolCall | null {
  const tools = (request.tools ?? []).filter((tool) => tool.type === 'function');
  if (tools.length === 0 || request.tool_choice === 'none') return null;
  if (request.messages.at(-1)?.role === 'tool') return null;
  const chosen = namedChoice(request.tool_choice);
  const tool =
    chosen === undefined
      ? tools[0]
      : tools.find((candidate) => functionOf(candidate)?.name === chosen);
  const fn = tool === undefined ? undefined : functionOf(tool);
  if (fn === undefined) {
    if (chosen === undefined) return null;
    throw new OpenAIHttpError({
      status: 400,
      type: 'invalid_request_error',
      message: `Tool '${chosen}' has not been passed in \`tools\`.`,
      param: 'tool_choice',
      code: 'invalid_value',
    });
  }
  const args = JSON.stringify(argumentsFor(fn.parameters ?? { type: 'object' }, word));
  return { name: fn.name, arguments: args, fragments: tokenizePrompt(args) };
}

/** Decode steps the call takes: its header, then one per argument fragment. */
export function toolCallTokens(call: PlannedToolCall): number {
  return 1 + call.fragments.length;
}

/** A value valid against `schema`: the smallest such value this sim knows how to build. */
export function argumentsFor(schema: unknown, word: string): unknown {
  if (!isObject(schema)) return {};
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  if ('const' in schema) return schema.const;
  const variants = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(variants) && variants.length > 0) return argumentsFor(variants[0], word);
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;
  switch (type) {
    case 'string':
      return word;
    case 'number':
    case 'integer':
      return 1;
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'array':
      return arrayFor(schema, word);
    default:
      return objectFor(schema, word);
  }
}

function arrayFor(schema: JsonSchema, word: string): unknown[] {
  const minItems = typeof schema.minItems === 'number' ? schema.minItems : 0;
  if (minItems === 0) return [];
  return Array.from({ length: minItems }, () => argumentsFor(schema.items, word));
}

/** Each required property, or every property when none is required. */
function objectFor(schema: JsonSchema, word: string): Record<string, unknown> {
  const properties = isObject(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required)
    ? schema.required.filter((name): name is string => typeof name === 'string')
    : Object.keys(properties);
  const value: Record<string, unknown> = {};
  for (const name of required) value[name] = argumentsFor(properties[name], word);
  return value;
}

function namedChoice(choice: ChatCompletionRequest['tool_choice']): string | undefined {
  if (!isObject(choice) || !isObject(choice.function)) return undefined;
  return typeof choice.function.name === 'string' ? choice.function.name : undefined;
}

function functionOf(tool: { type: string }): { name: string; parameters?: unknown } | undefined {
  const fn = (tool as JsonSchema).function;
  if (!isObject(fn) || typeof fn.name !== 'string') return undefined;
  return { name: fn.name, parameters: fn.parameters };
}

function isObject(value: unknown): value is JsonSchema {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
