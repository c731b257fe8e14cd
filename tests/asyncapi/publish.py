"""An AMQP client built from an exported AsyncAPI document alone, for
crates/mesh-contract/tests/official_tools.rs: publishes one event of CHANNEL with pika.

    MESH_PUBLISH_URL=amqp://user:password@host:port/vhost python3 publish.py DOCUMENT CHANNEL BODY

The exchange, its type and durability come from the channel's AMQP binding, the routing key
from its address, the delivery mode from the send operation's binding, the content type from
the message, and the headers from the message's headers schema (every required one is set;
x-schema is the schema's const). The broker's URL (with credentials, which the document never
carries) comes from the environment. Prints the event id it sent.
"""

import datetime
import json
import os
import sys
import uuid

import pika


def main():
    document_path, channel_id, body = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(document_path, encoding="utf-8") as f:
        document = json.load(f)
    channel = document["channels"][channel_id]
    binding = channel["bindings"]["amqp"]
    assert binding["is"] == "routingKey", binding
    exchange = binding["exchange"]
    routing_key = channel["address"]

    send = [
        op
        for op in document["operations"].values()
        if op["action"] == "send" and op["channel"]["$ref"] == f"#/channels/{channel_id}"
    ][0]
    delivery_mode = send["bindings"]["amqp"].get("deliveryMode", 1)

    message_ref = send["messages"][0]["$ref"]
    message = resolve(document, resolve(document, message_ref)["$ref"])
    headers_schema = message["headers"]
    owner_word = routing_key.split(".")[1]
    values = {
        "x-event-id": str(uuid.uuid4()),
        "x-source": owner_word,
        "x-node": "pika",
        "x-time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    headers = {}
    for name in headers_schema["required"]:
        headers[name] = values[name]
    schema_header = headers_schema["properties"].get("x-schema", {})
    if "const" in schema_header:
        headers["x-schema"] = schema_header["const"]

    connection = pika.BlockingConnection(pika.URLParameters(os.environ["MESH_PUBLISH_URL"]))
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        # Passive: the exchange is the mesh's, declared by its buses; this checks the binding's
        # name, type and durability against the broker's.
        ch.exchange_declare(
            exchange=exchange["name"],
            exchange_type=exchange["type"],
            durable=exchange["durable"],
            auto_delete=exchange["autoDelete"],
            passive=True,
        )
        ch.basic_publish(
            exchange=exchange["name"],
            routing_key=routing_key,
            body=body.encode("utf-8"),
            properties=pika.BasicProperties(
                content_type=message.get("contentType", document.get("defaultContentType")),
                delivery_mode=delivery_mode,
                headers=headers,
            ),
            mandatory=True,
        )
    finally:
        connection.close()
    print(headers["x-event-id"])


def resolve(document, reference):
    node = document
    for token in reference.lstrip("#/").split("/"):
        node = node[token.replace("~1", "/").replace("~0", "~")]
    return node


if __name__ == "__main__":
    main()
