//! A layer's handler running a client handler on the message it handles
//! ([`Token::deliver_client`]): a layer that carries a program's message inside its
//! own (records applied first, then the program's handler) delivers it this way.
//!
//! # Safety
//! A layer handler's [`Token`] points at the dispatcher's client handler table
//! (`dispatch::Clients`, lifetime erased), which [`Token::deliver_client`] borrows
//! mutably. The dispatcher sets the pointer only for a layer's handler, whose token
//! lives inside the delivery of one message, during which the dispatcher itself does
//! not touch the table; the borrow ends before `deliver_client` returns, and a
//! client handler's token (the nested one included) has no pointer, so no two
//! borrows of the table overlap.
#![allow(unsafe_code)]

use super::OWN_CLIENT;
use super::am::{Am, Body, Token};
use super::dispatch::{Clients, caught};
use crate::error::AmError;
use crate::types::{Category, FIRST_CLIENT_HANDLER, HandlerId};
use std::panic::{AssertUnwindSafe, catch_unwind};

impl Token<'_> {
    /// A layer's handler only: runs the client (program) handler `handler` on `body`
    /// as if the message had arrived for it. The client handler gets a token of the
    /// same source and kind (a request's handler may reply to the original sender; at
    /// most one reply over this token and the client's together) and an [`Am`] of the
    /// body's category with this message's source and kind. A layer that carries a
    /// program's message inside its own (a put applied first, then the program's
    /// handler) delivers it this way. Short and Medium only: a Long payload lands in
    /// the segment before any handler runs, which a layer cannot do for a payload it
    /// carries.
    ///
    /// A panic in the client handler is caught and kept like any handler's, and
    /// raised by the call that polled (this returns `Ok(())` after it, and the layer's
    /// handler goes on: its own bookkeeping is not cut short).
    ///
    /// ```
    /// use gex_core::layer::{Attach, Layer};
    /// use gex_core::{boot::Singleton, loopback::Loopback, spi::Conduit};
    /// use gex_core::{Am, Body, Category, ClientBuilder, HandlerId, Token};
    /// use std::pin::Pin;
    ///
    /// /// Forwards its messages to the client handler named by their first argument.
    /// struct Forward(HandlerId);
    /// impl Layer for Forward {
    ///     const NAME: &'static str = "forward";
    ///     const HANDLERS: u8 = 1;
    ///     fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, gex_core::InitError> {
    ///         Ok(Forward(cx.handler(0)))
    ///     }
    ///     fn handle(self: Pin<&mut Self>, _h: u8, t: &mut Token<'_>, am: Am<'_>) {
    ///         let to = HandlerId::try_at(am.args()[0] as u8).unwrap();
    ///         t.deliver_client(to, Body::medium(&am.args()[1..], am.payload())).unwrap();
    ///     }
    /// }
    ///
    /// let client = ClientBuilder::new().layer::<Forward>()
    ///     .init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// let h = ep.register(|t: &mut Token<'_>, am: Am<'_>| {
    ///     assert_eq!((am.args(), am.payload()), (&[7][..], &b"hi"[..]));
    ///     // A client handler's own token cannot forward.
    ///     assert!(t.deliver_client(HandlerId::at(128), Body::short(&[])).is_err());
    /// })?;
    /// let fwd = gex_core::layer::with::<Forward, _, _>(&mut *ep, |f, _| f.0).unwrap();
    /// let me = ep.addr();
    /// gex_core::layer::with::<Forward, _, _>(&mut *ep, |_, cx| {
    ///     cx.try_request(me, fwd, Category::Medium, &[u32::from(h.index()), 7], b"hi", 0)
    /// }).unwrap()?;
    /// ep.poll();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`AmError::NotFromLayer`] (this token is a client handler's),
    /// [`AmError::LongDelivered`], [`AmError::ReservedHandler`] (an index below
    /// [`FIRST_CLIENT_HANDLER`]), [`AmError::UnregisteredHandler`] (no client handler
    /// registered at the index). Nothing runs on error.
    pub fn deliver_client(&mut self, handler: HandlerId, body: Body<'_>) -> Result<(), AmError> {
        let Some(clients) = self.clients else {
            return Err(AmError::NotFromLayer);
        };
        if body.category == Category::Long {
            return Err(AmError::LongDelivered);
        }
        let h = handler.index();
        if h < FIRST_CLIENT_HANDLER {
            return Err(AmError::ReservedHandler(h));
        }
        if self.owner[h as usize] != OWN_CLIENT {
            return Err(AmError::UnregisteredHandler(h));
        }
        // SAFETY: set by the dispatcher for this layer handler's delivery only, to its
        // `Clients`, which outlive the token; nothing else borrows them until this
        // borrow (bounded by `&mut self`) ends (module `# Safety`).
        let clients = unsafe { &mut *clients.cast::<Clients<'_>>().as_ptr() };
        let f = clients.handlers[h as usize]
            .as_mut()
            .expect("the owner table says a client handler is here");
        let mut t = Token {
            tx: &mut *self.tx,
            src: self.src,
            kind: self.kind,
            replied: self.replied,
            shared: self.shared,
            owner: self.owner,
            limits: self.limits,
            min_handler: FIRST_CLIENT_HANDLER,
            clients: None,
        };
        let am = Am {
            src: self.src,
            category: body.category,
            kind: self.kind,
            args: body.args,
            payload: body.payload,
            long: None,
        };
        am_trace!(
            "deliver_client",
            self.src,
            h,
            body.category,
            body.payload.len()
        );
        let r = catch_unwind(AssertUnwindSafe(|| f(&mut t, am)));
        self.replied = t.replied;
        if let Err(p) = r {
            caught(clients.panicked, p);
        }
        Ok(())
    }
}
