"""The forms of the pages that send requests: the playground's prompt and a run's re-run.

Each turns what staff entered into the JSON body the pipeline takes; the key and model are
chosen from lists (`selectors.sending`), so a form error names a bad choice before anything is
sent.
"""

from __future__ import annotations

from typing import Any

import orjson
from django import forms

from dashboard.forms import set_choices

AS_STORED = ""


class RerunForm(forms.Form):
    key = forms.TypedChoiceField(coerce=int, label="Send with key")
    model = forms.ChoiceField(required=False, label="Model")
    request = forms.CharField(
        label="Request (JSON)",
        widget=forms.Textarea(attrs={"rows": 18, "spellcheck": "false", "class": "mono"}),
        strip=False,
    )

    def __init__(
        self,
        *args: Any,
        keys: list[tuple[int, str]],
        models: list[str],
        stored_model: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        set_choices(self, "key", [(str(pk), label) for pk, label in keys])
        as_stored = f"as stored ({stored_model})" if stored_model else "as stored"
        set_choices(self, "model", [(AS_STORED, as_stored), *((m, m) for m in models)])

    def clean_request(self) -> dict[str, Any]:
        try:
            value = orjson.loads(self.cleaned_data["request"])
        except orjson.JSONDecodeError as error:
            raise forms.ValidationError(f"Not valid JSON: {error}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("The request must be one JSON object.")
        return value

    def body(self) -> bytes:
        """The request to send: the edited JSON, with the chosen model in it."""
        request: dict[str, Any] = dict(self.cleaned_data["request"])
        if self.cleaned_data["model"] != AS_STORED:
            request["model"] = self.cleaned_data["model"]
        return orjson.dumps(request)


class PlaygroundForm(forms.Form):
    key = forms.TypedChoiceField(coerce=int, label="Key")
    model = forms.ChoiceField(label="Model")
    system = forms.CharField(
        required=False, label="System", widget=forms.Textarea(attrs={"rows": 3})
    )
    prompt = forms.CharField(label="Prompt", widget=forms.Textarea(attrs={"rows": 6}))
    max_tokens = forms.IntegerField(required=False, min_value=1, max_value=32768)
    temperature = forms.FloatField(required=False, min_value=0, max_value=2)

    def __init__(
        self, *args: Any, keys: list[tuple[int, str]], models: list[str], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        set_choices(self, "key", [(str(pk), label) for pk, label in keys])
        set_choices(self, "model", [(m, m) for m in models])

    def body(self) -> bytes:
        """A streamed chat completion of the prompt, with usage at the end."""
        data = self.cleaned_data
        messages = [{"role": "user", "content": data["prompt"]}]
        if data["system"].strip():
            messages.insert(0, {"role": "system", "content": data["system"]})
        body: dict[str, Any] = {
            "model": data["model"],
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for name in ("max_tokens", "temperature"):
            if data[name] is not None:
                body[name] = data[name]
        return orjson.dumps(body)
