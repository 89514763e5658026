import { CHARS_PER_TOKEN } from '@fairgate/openai';
import { createRng, type Rng, uniformInt } from '@fairgate/runtime';

/**
 * Deterministic pseudo-text: one word per generated token.
 *
 * Every word is exactly CHARS_PER_TOKEN characters (a space and three letters), so a text
 * of n generated tokens has length 4n and the shared token estimate of the output text
 * (ceil(length / 4)) equals the completion_tokens the sim reports.
 */
const WORDS: readonly string[] = (
  ' the and for are but not you all any can had her was one our out day get has' +
  ' him his how man new now old see two way who boy did its let put say she too' +
  ' use sky sea sun red big far run ask own why yes end air set top few'
).split(/(?= )/);

for (const word of WORDS) {
  if (word.length !== CHARS_PER_TOKEN) throw new Error(`pseudo-text word ${word} is not one token`);
}

export class PseudoText {
  private readonly rng: Rng;

  constructor(seed: number) {
    this.rng = createRng(seed);
  }

  /** The next token's text. */
  next(): string {
    return WORDS[uniformInt(this.rng, 0, WORDS.length - 1)]!;
  }
}
