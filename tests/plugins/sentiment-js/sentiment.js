// sentiment-js: the JavaScript SDK's output-extension helpers inside a real plugin.
// #stats[:brief] counts words and sentences; #sentiment asks the host's model in JSON
// mode and returns the first JSON object of its answer (errorResult when there is none).
import {
  Plugin, countWords, definePlugin, errorResult, extractJsonFromText, extractSentences, hook,
  jsonResult, llmComplete, truncate,
} from "wasmext";

function stats(data) {
  const answer = String(data.answer ?? "");
  if (data.param === "brief") return jsonResult({ words: countWords(answer) });
  return jsonResult({
    words: countWords(answer),
    sentences: extractSentences(answer).length,
    preview: truncate(answer, 12),
    earlier: (data.previous ?? []).map((r) => r.name),
  }, { helper: "wasmext (javascript)" });
}

function sentiment(data) {
  const answer = String(data.answer ?? "");
  const reply = llmComplete(`Rate the sentiment of this text as JSON: ${answer}`,
    { jsonMode: true, maxTokens: 64 });
  const found = extractJsonFromText(reply.text);
  if (found === null || Array.isArray(found)) throw errorResult("the model gave no JSON object");
  return jsonResult(found, { model: reply.model });
}

class Sentiment extends Plugin {
  info() { return { name: "sentiment-js", version: "0.1.0" }; }

  hooks() {
    return [hook("output_extension", stats, { pattern: "stats" }),
      hook("output_extension", sentiment, { pattern: "sentiment" })];
  }

  extra() {
    return { output_extensions: [
      { name: "stats", allowed_params: ["brief"], content_type: "application/json" },
      { name: "sentiment", output_target: "status_panel" }] };
  }
}

export const { register, call } = definePlugin(new Sentiment());
