"""POST /v5/responses on the embedded model (the real SmolLM2, bridged through its chat
translator) with the official openai SDK: plain and streamed, then retrieved, its input items
listed, deleted; its usage the ledger's, and nothing of another account's reachable."""

from __future__ import annotations

import openai
import pytest

from tests.support.provision import create_key

MODEL = "local/smollm2-135m"


@pytest.fixture
def oai(local_gateway, database):
    return openai.OpenAI(api_key=database.key, base_url=f"{local_gateway.url}/v5", max_retries=0, timeout=120)


def test_create_retrieve_list_and_delete(oai):
    answer = oai.responses.create(model=MODEL, input="Name a city.", instructions="Answer briefly.",
                                  max_output_tokens=4, temperature=0, metadata={"case": "plain"})
    assert answer.id.startswith("resp_") and answer.object == "response"
    assert answer.status == "incomplete" and answer.incomplete_details.reason == "max_output_tokens" \
        or answer.status == "completed"
    assert answer.output_text and answer.output[0].type == "message"
    assert 0 < answer.usage.output_tokens <= 4 and answer.usage.input_tokens > 5
    assert answer.usage.total_tokens == answer.usage.input_tokens + answer.usage.output_tokens

    kept = oai.responses.retrieve(answer.id)
    assert kept.output_text == answer.output_text and kept.usage == answer.usage
    assert kept.metadata == {"case": "plain"} and kept.instructions == "Answer briefly."
    items = oai.responses.input_items.list(answer.id)
    assert [item.type for item in items.data] == ["message"]
    assert items.data[0].content[0].text == "Name a city."

    deleted = oai.responses.delete(answer.id)
    assert deleted is None  # the SDK returns nothing for a 200 deletion
    with pytest.raises(openai.NotFoundError) as gone:
        oai.responses.retrieve(answer.id)
    assert gone.value.body["code"] == "response_not_found"


def test_a_stream_is_openais_event_sequence_and_is_kept(oai):
    events = list(oai.responses.create(model=MODEL, input="Name a city.", max_output_tokens=4, temperature=0,
                                       stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "response.output_text.delta" in kinds and "response.output_item.done" in kinds
    final = events[-1].response
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert final.output_text == text and 0 < final.usage.output_tokens <= 4
    kept = oai.responses.retrieve(final.id)
    assert kept.status == final.status and kept.output_text == text and kept.usage == final.usage


def test_chained_responses_carry_the_conversation_and_store_false_keeps_nothing(oai):
    first = oai.responses.create(model=MODEL, input="My name is Ada.", max_output_tokens=3, temperature=0)
    second = oai.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id,
                                  max_output_tokens=3, temperature=0)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens  # it was sent the first turn too
    unkept = oai.responses.create(model=MODEL, input="Hi.", max_output_tokens=2, temperature=0, store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(unkept.id)
    with pytest.raises(openai.NotFoundError) as chained:
        oai.responses.create(model=MODEL, input="Hi.", previous_response_id=unkept.id, max_output_tokens=2)
    assert chained.value.body["param"] == "previous_response_id"


def test_another_accounts_response_is_not_found(oai, local_gateway, database):
    mine = oai.responses.create(model=MODEL, input="Hi.", max_output_tokens=2, temperature=0)
    other_key = create_key(database.url, "responses-other")
    theirs = openai.OpenAI(api_key=other_key, base_url=f"{local_gateway.url}/v5", max_retries=0, timeout=120)
    for attempt in (lambda: theirs.responses.retrieve(mine.id), lambda: theirs.responses.delete(mine.id),
                    lambda: theirs.responses.input_items.list(mine.id),
                    lambda: theirs.responses.create(model=MODEL, input="Hi.", previous_response_id=mine.id,
                                                    max_output_tokens=2)):
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert refused.value.status_code == 404 and refused.value.body["code"] == "response_not_found"
    assert oai.responses.retrieve(mine.id).id == mine.id  # still there for its own account
