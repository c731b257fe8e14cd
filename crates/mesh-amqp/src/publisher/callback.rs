//! The publish channel's callbacks. The client library runs them on its own tasks: they
//! only forward each confirm, return and close to the publish task as an [`Event`], tagged
//! with the channel's generation so that late events of a replaced channel are ignored.

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::Channel;
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use mesh_core::WireMessage;
use tokio::sync::mpsc;

use crate::convert::from_delivery;
use crate::error::BrokerClose;

/// What the channel callbacks report.
pub(super) enum Event {
    Ack {
        generation: u64,
        tag: u64,
        multiple: bool,
    },
    Nack {
        generation: u64,
        tag: u64,
        multiple: bool,
    },
    Return {
        generation: u64,
        exchange: String,
        code: u16,
        text: String,
        message: Box<WireMessage>,
    },
    Closed {
        generation: u64,
        close: BrokerClose,
    },
}

/// The publish channel's callbacks: forward everything to the task.
pub(super) struct PublishCallback {
    pub(super) generation: u64,
    pub(super) events: mpsc::UnboundedSender<Event>,
}

#[async_trait::async_trait]
impl ChannelCallback for PublishCallback {
    async fn close(
        &mut self,
        _channel: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        let _ = self.events.send(Event::Closed {
            generation: self.generation,
            close: BrokerClose {
                code: close.reply_code(),
                text: close.reply_text().clone(),
            },
        });
        Ok(())
    }

    async fn cancel(
        &mut self,
        _channel: &Channel,
        _cancel: Cancel,
    ) -> Result<(), amqprs::error::Error> {
        Ok(())
    }

    async fn flow(
        &mut self,
        _channel: &Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        let _ = self.events.send(Event::Ack {
            generation: self.generation,
            tag: ack.delivery_tag(),
            multiple: ack.mutiple(),
        });
    }

    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        let _ = self.events.send(Event::Nack {
            generation: self.generation,
            tag: nack.delivery_tag(),
            multiple: nack.multiple(),
        });
    }

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        ret: Return,
        properties: BasicProperties,
        content: Vec<u8>,
    ) {
        let _ = self.events.send(Event::Return {
            generation: self.generation,
            exchange: ret.exchange().clone(),
            code: ret.reply_code(),
            text: ret.reply_text().clone(),
            message: Box::new(from_delivery(
                ret.routing_key().clone(),
                properties,
                content,
            )),
        });
    }
}
