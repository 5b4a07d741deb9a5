"""Reference 003's level-3 example as a sandboxed Python plugin, with the SDK helpers.

#sentiment asks the host's model (llm.complete, json_mode) and reads the first JSON
object of its answer with `extract_json_from_text`; #stats needs no model. Both
build their result with `json_result`, whose metadata the host puts under the
result's `metadata.plugin`; a model answer without JSON is `error_result`.
"""

from wasmext_guest import (
    Plugin,
    count_words,
    error_result,
    export,
    extract_json_from_text,
    extract_sentences,
    hook,
    json_result,
    llm_complete,
)


class Sentiment(Plugin):
    name = "sentiment-py"
    version = "0.1.0"

    def extra(self) -> dict:
        return {"output_extensions": [
            {"name": "sentiment", "output_target": "status_panel"},
            {"name": "stats", "output_target": "silent", "allowed_params": ["brief"]}]}

    @hook("output_extension", pattern="sentiment")
    def sentiment(self, data: dict) -> dict:
        answer = llm_complete(f"Classify the sentiment:\n\n{data['answer']}",
                              system="Return JSON: {sentiment, confidence}",
                              max_tokens=100, temperature=0.2, json_mode=True)
        parsed = extract_json_from_text(answer["text"])
        if not isinstance(parsed, dict):
            raise error_result("the model's answer holds no JSON object")
        return json_result(parsed, model=answer["model"])

    @hook("output_extension", pattern="stats")
    def stats(self, data: dict) -> dict:
        text = data["answer"]
        if data.get("param") == "brief":
            return json_result({"words": count_words(text)})
        return json_result({"words": count_words(text),
                            "sentences": len(extract_sentences(text)),
                            "earlier": [r["name"] for r in data.get("previous", [])]},
                           helper="wasmext_guest.helpers")


WitWorld = export(Sentiment())
