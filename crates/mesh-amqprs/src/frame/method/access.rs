/// Deprecated: see [RabbitMQ Spec Differences](https://www.rabbitmq.com/spec-differences.html)
#[allow(dead_code)]
pub struct Request; // Deprecated

#[allow(dead_code)]
pub struct RequestOk; // Deprecated
