"""One module per API dialect: each validates its request body into a
`GenerationRequest` and writes the generation's events in its wire format
(a whole JSON body, or server-sent events). No dialect decodes anything.

* `chat`: OpenAI Chat Completions (``/v1/chat/completions``);
* `completions`: OpenAI Completions (``/v1/completions``); both write their
  chunks with `chunks.ChunkWriter`;
* `responses`: OpenAI Responses (``/v1/responses``), written by
  `responses_writer`, finished responses kept in `store` for
  ``previous_response_id``;
* `messages`: Anthropic Messages (``/v1/messages``).

The two agent dialects cut a reply into parts (reasoning, text, calls) with
`segments.Segmenter`;
`common` holds what several dialects share. Each dialect's ``open_*`` returns
the request and the writer of its response.
"""
