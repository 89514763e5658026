import { CHARS_PER_TOKEN, tokenizePrompt } from '@fairgate/openai';

/**
 * Token ids for the shared token estimate (4-character slices of the text), so /tokenize and
 * /detokenize agree with the token counts every other endpoint reports.
 *
 * A token of 1-4 ASCII characters is its own id: 7 bits per character and 2 bits of length,
 * below 2^30, the same in every process. Any other token gets the next id from 2^30 up, kept
 * in this process's table, so detokenize inverts every id this sim handed out.
 */
const ASCII_BITS = 7;
const TABLE_BASE = 2 ** 30;

export class Vocabulary {
  private readonly idsByToken = new Map<string, number>();
  private readonly tokensById: string[] = [];

  /** The ids of a text's estimated tokens. */
  encode(text: string): { ids: number[]; tokens: string[] } {
    const tokens = tokenizePrompt(text);
    return { ids: tokens.map((token) => this.idOf(token)), tokens };
  }

  /** The text of ids this vocabulary gave, or the first id it never gave. */
  decode(ids: readonly number[]): { text: string } | { unknownId: number } {
    let text = '';
    for (const id of ids) {
      const token = this.tokenOf(id);
      if (token === undefined) return { unknownId: id };
      text += token;
    }
    return { text };
  }

  idOf(token: string): number {
    const packed = packAscii(token);
    if (packed !== null) return packed;
    let id = this.idsByToken.get(token);
    if (id === undefined) {
      id = TABLE_BASE + this.tokensById.length;
      this.tokensById.push(token);
      this.idsByToken.set(token, id);
    }
    return id;
  }

  tokenOf(id: number): string | undefined {
    if (!Number.isInteger(id) || id < 0) return undefined;
    if (id >= TABLE_BASE) return this.tokensById[id - TABLE_BASE];
    return unpackAscii(id);
  }
}

function packAscii(token: string): number | null {
  if (token.length < 1 || token.length > CHARS_PER_TOKEN) return null;
  let packed = token.length - 1;
  for (let index = 0; index < CHARS_PER_TOKEN; index++) {
    const code = index < token.length ? token.charCodeAt(index) : 0;
    if (code >= 1 << ASCII_BITS) return null;
    packed = packed * (1 << ASCII_BITS) + code;
  }
  return packed;
}

function unpackAscii(id: number): string | undefined {
  const codes: number[] = [];
  let rest = id;
  for (let index = 0; index < CHARS_PER_TOKEN; index++) {
    codes.unshift(rest % (1 << ASCII_BITS));
    rest = Math.floor(rest / (1 << ASCII_BITS));
  }
  const length = rest + 1;
  if (length > CHARS_PER_TOKEN) return undefined;
  // A real token has no NUL inside its length and only padding after it.
  if (codes.slice(0, length).includes(0) || codes.slice(length).some((code) => code !== 0)) {
    return undefined;
  }
  return String.fromCharCode(...codes.slice(0, length));
}
